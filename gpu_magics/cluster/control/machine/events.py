"""What the kernel's cluster hears (frozen ``Event``s: what a verb asks, what its job learnt) and what it answers
(``Instruction``s, which the owner thread and the verb that posted the event carry out)."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, ClassVar

if TYPE_CHECKING:
    from concurrent.futures import Future

    from gpu_magics.cluster.background.closing import Closing
    from gpu_magics.cluster.background.starting import Starting
    from gpu_magics.cluster.reading.running import ActiveCluster, Parked, ParkWatch, Role, Service


# -- events: what happened, as the verbs and their jobs tell it ----------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Event:
    what: ClassVar[str] = "an event"  # the refusal's words


@dataclasses.dataclass(frozen=True)
class StartAsked(Event):
    """A verb asks to begin ``start``, decided from the machine at generation ``seen``."""

    what = "beginning a start"
    start: Starting
    seen: int


@dataclasses.dataclass(frozen=True)
class SchedulerAnswered(Event):
    """``start``'s scheduler answered: its ``cluster`` is in use while its workers come."""

    what = "taking a cluster into use"
    start: Starting
    cluster: ActiveCluster
    services: tuple[tuple[Role, Service], ...] = ()  # what runs beside it from then on (refused: stopped)


@dataclasses.dataclass(frozen=True)
class WorkersReady(Event):
    """``start``'s workers are up and warm, ``elapsed`` seconds after the line asked for them."""

    what = "ending a start"
    start: Starting
    elapsed: float = 0.0


@dataclasses.dataclass(frozen=True)
class StartEnded(Event):
    """``start``'s job ended without a cluster: it ``failed``, or it was stopped."""

    what = "ending a start"
    start: Starting
    failed: bool


@dataclasses.dataclass(frozen=True)
class ChangeAsked(Event):
    """A restart or scale (``change``) of ``cluster``, which the verb saw in use, is asked."""

    what = "beginning a change"
    change: Starting
    cluster: ActiveCluster | None


@dataclasses.dataclass(frozen=True)
class ChangeEnded(Event):
    """``change`` ended, done or failed (the cluster stays in use)."""

    what = "ending a change"
    change: Starting


@dataclasses.dataclass(frozen=True)
class ParkAsked(Event):
    """A park of ``cluster``, which the verb saw in use, is asked; ``done`` says when it ended, parked or not (a
    resume asked meanwhile waits for it)."""

    what = "parking"
    cluster: ActiveCluster
    done: Future[None] = dataclasses.field(default_factory=lambda: _future())


@dataclasses.dataclass(frozen=True)
class WorkersMoved(Event):
    """``cluster``'s workers moved: parked (``parked``: what the park holds) or running again (``None``)."""

    what = "moving the workers"
    cluster: ActiveCluster
    parked: Parked | None = None


@dataclasses.dataclass(frozen=True)
class ResumeAsked(Event):
    """A resume of ``cluster``'s parked workers is asked; ``done`` says how it ended (others asking meanwhile wait
    for it)."""

    what = "resuming"
    cluster: ActiveCluster
    done: Future[None]


@dataclasses.dataclass(frozen=True)
class ResumeFailed(Event):
    """The resume under way of ``cluster``'s workers failed: they stay parked, the next try starts again."""

    what = "resuming"
    cluster: ActiveCluster


@dataclasses.dataclass(frozen=True)
class IdleFor(Event):
    """``watch`` saw ``cluster`` run no task for as long as it waits (``park_after``)."""

    what = "parking an idle cluster"
    cluster: ActiveCluster
    watch: ParkWatch


@dataclasses.dataclass(frozen=True)
class AdaptAsked(Event):
    """``cluster``'s workers are asked to adapt between a minimum and a maximum."""

    what = "adapting"
    cluster: ActiveCluster


@dataclasses.dataclass(frozen=True)
class FreeAsked(Event):
    """``cluster``'s workers are asked to give back what their pools cache."""

    what = "freeing the workers' memory"
    cluster: ActiveCluster


@dataclasses.dataclass(frozen=True)
class SwapService(Event):
    """Beside ``cluster``, ``service`` does ``role`` from now on (``None``: nothing does); ``only_if``: only where
    that one does it now (a watch that detaches itself)."""

    what = "changing what runs beside the cluster"
    cluster: ActiveCluster
    role: Role
    service: Service | None
    only_if: Service | None = None


@dataclasses.dataclass(frozen=True)
class StopAsked(Event):
    """A stop is asked (``only``: only while that cluster is in use; ``keep``: only a cluster that can be kept;
    ``resumed``: the poster resumed a parked cluster first, or tried: it closes as it is)."""

    what = "stopping"
    only: ActiveCluster | None = None
    keep: bool = False
    resumed: bool = False


@dataclasses.dataclass(frozen=True)
class CloseBegan(Event):
    """What a stop took out ends its processes in ``closing``."""

    what = "closing"
    closing: Closing


@dataclasses.dataclass(frozen=True)
class CloseEnded(Event):
    """What the stop left (``what``; ``None``: whatever it was) ended its processes."""

    what = "ending a close"
    ended: Starting | Closing | None = None


# -- instructions: what the owner and the poster carry out ------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Instruction:
    pass


@dataclasses.dataclass(frozen=True)
class Refused(Instruction):
    """The event changed nothing: its phase does not allow it, or what it is about is no longer under way."""

    why: str


@dataclasses.dataclass(frozen=True)
class LookAgain(Instruction):
    """A start decided from an old view: the verb looks again."""


@dataclasses.dataclass(frozen=True)
class KeepRefused(Instruction):
    """``stop --keep`` of ``cluster``, which cannot outlive its kernel: nothing changed."""

    cluster: ActiveCluster


@dataclasses.dataclass(frozen=True)
class StopServices(Instruction):
    """What ran beside a cluster and no longer does: stopped on the poster's thread, in this order (they wait for
    their threads)."""

    services: tuple[Service, ...]


@dataclasses.dataclass(frozen=True)
class TellListeners(Instruction):
    """The cluster in use is now ``cluster`` (``None``: none): its listeners hear it, on the poster's thread."""

    cluster: ActiveCluster | None


@dataclasses.dataclass(frozen=True)
class TakeIntoUse(Instruction):
    """``start``'s scheduler answered: the owner sets what using ``cluster`` needs (dask's settings, the record's
    refresh), in the same step as the machine took it."""

    start: Starting
    cluster: ActiveCluster


@dataclasses.dataclass(frozen=True)
class StartReady(Instruction):
    """``start``'s workers are ready: the owner sets what ``cluster``'s workers need, and the start says how long it
    took (``elapsed`` seconds)."""

    start: Starting
    cluster: ActiveCluster | None
    elapsed: float


@dataclasses.dataclass(frozen=True)
class CancelStart(Instruction):
    """A stop took out the start under way: it is cancelled (what it made, its job closes)."""

    start: Starting


@dataclasses.dataclass(frozen=True)
class CloseCluster(Instruction):
    """A stop took ``cluster`` out of use: it is let go and closed (``during``: the change it stopped)."""

    cluster: ActiveCluster
    during: Starting | None = None


@dataclasses.dataclass(frozen=True)
class ResumeFirst(Instruction):
    """``cluster`` is parked: the poster resumes it first, then posts its event again."""

    cluster: ActiveCluster


@dataclasses.dataclass(frozen=True)
class ResumeWorkers(Instruction):
    """The poster resumes ``cluster``'s workers, then posts how it went and settles ``done``."""

    cluster: ActiveCluster
    done: Future[None]


@dataclasses.dataclass(frozen=True)
class JoinPark(Instruction):
    """A park is under way (its workers not parked yet): the poster waits for ``done``, then asks again."""

    done: Future[None]


@dataclasses.dataclass(frozen=True)
class JoinResume(Instruction):
    """A resume is under way already: the poster waits for ``done``."""

    done: Future[None]


@dataclasses.dataclass(frozen=True)
class ParkIdle(Instruction):
    """The idle watch's thread parks ``cluster`` (where no task runs)."""

    cluster: ActiveCluster


@dataclasses.dataclass(frozen=True)
class WatchAgain(Instruction):
    """A start or change that an idle watch waited for ended: ``watch`` watches again (on the poster's thread)."""

    watch: ParkWatch


def accepted(instructions: list[Instruction]) -> bool:
    """Whether the event was taken (neither refused nor decided from an old view)."""
    return not any(isinstance(item, (Refused, LookAgain, KeepRefused)) for item in instructions)


def _future() -> Future[None]:
    from concurrent.futures import Future

    return Future()
