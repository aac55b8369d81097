"""The kernel's one cluster as a machine: events in, instructions out (``KernelCluster.handle``).

::

              StartAsked                  WorkersReady
      IDLE ───────────────▶ STARTING ─────────────────▶ IN_USE ◀──────────────┐
       ▲ ▲                   │    │                      │   │ ChangeAsked    │
       │ │     StartEnded    │    │ StopAsked            │   ▼                │ ChangeEnded
       │ └───────────────────┘    │                      │  CHANGING ─────────┘
       │                          ▼          StopAsked   │   │ StopAsked
       └──────────────────── CLOSING ◀───────────────────┘◀──┘◀─── PARKED
              CloseEnded        │ StartAsked            ParkAsked │   ▲ │ WorkersMoved (resumed)
                                └──────────▶ STARTING     IN_USE ──┘   └──▶ IN_USE

One table (``TABLE``) keyed by (phase, event type) holds the whole behaviour: a pair it lacks is refused
(``Refused``), and so is an event about a start, change or close that is no longer the one under way. A start
decided from an old view (``StartAsked.seen``: the generation it saw) is answered ``LookAgain``: the verb looks
again. A start's cluster may be in use (``SchedulerAnswered``) while the phase is still ``STARTING``: cells may send
it tasks while its workers come. A start that failed is kept (``failed``) until a cell or a verb said its line.
No thread, lock or I/O in here; the last events, with the phase and generation they met, are kept in ``log``.
"""

from __future__ import annotations

import collections
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

from gpu_magics.cluster.control.machine.events import (
    AdaptAsked,
    CancelStart,
    ChangeAsked,
    ChangeEnded,
    CloseBegan,
    CloseCluster,
    CloseEnded,
    Event,
    FreeAsked,
    IdleFor,
    Instruction,
    JoinPark,
    JoinResume,
    KeepRefused,
    LookAgain,
    ParkAsked,
    ParkIdle,
    Refused,
    ResumeAsked,
    ResumeFailed,
    ResumeFirst,
    ResumeWorkers,
    SchedulerAnswered,
    StartAsked,
    StartEnded,
    StartReady,
    StopAsked,
    StopServices,
    SwapService,
    TakeIntoUse,
    TellListeners,
    WatchAgain,
    WorkersMoved,
    WorkersReady,
)
from gpu_magics.cluster.control.machine.phase import Phase, PhaseRefused, Stimulus, View

if TYPE_CHECKING:
    from concurrent.futures import Future

    from gpu_magics.cluster.background.closing import Closing
    from gpu_magics.cluster.background.starting import Starting
    from gpu_magics.cluster.reading.running import ActiveCluster, ParkWatch, Service

LOG_LENGTH = 100  # how many of the last events the machine keeps


class KernelCluster:
    """The phase and what it holds; ``handle`` is its only way to change."""

    def __init__(self) -> None:
        self.phase = Phase.IDLE
        self.cluster: ActiveCluster | None = None
        self.pending: Starting | None = None
        self.failed: Starting | None = None
        self.winding: Starting | Closing | None = None
        self.generation = 0
        self.resuming: Future[None] | None = None  # the resume of the parked workers under way
        self.parking: Future[None] | None = None  # the park under way (PARKED, its workers not parked yet)
        self.idle_waiting: ParkWatch | None = None  # an idle watch that waits for the start or change under way
        self.log: collections.deque[Stimulus] = collections.deque(maxlen=LOG_LENGTH)

    def view(self) -> View:
        return View(self.phase, self.cluster, self.pending, self.failed, self.winding, self.generation)

    def handle(self, event: Event) -> list[Instruction]:
        """The row of ``TABLE`` for this phase and ``event``'s type, run; a pair the table lacks is refused."""
        phase, generation = self.phase, self.generation
        row = TABLE.get((phase, type(event)))
        instructions = row(self, event) if row is not None else self._refused(event)
        self.log.append(Stimulus(type(event), phase, generation, tuple(type(done) for done in instructions)))
        return instructions

    def _refused(self, event: Event, why: str = "") -> list[Instruction]:
        return [Refused(f"{event.what}: {why or f'refused while the cluster is {self.phase.value}'}")]

    def _move(self, phase: Phase) -> None:
        self.phase = phase
        self.generation += 1

    def _use(self, cluster: ActiveCluster | None) -> list[Instruction]:
        previous, self.cluster = self.cluster, cluster
        return [] if previous is cluster else [TellListeners(cluster)]

    # -- the rows -------------------------------------------------------------------------------------------------
    def _begin_start(self, event: StartAsked) -> list[Instruction]:
        """A close still under way is let go: the start waited for it as long as it would."""
        if event.seen != self.generation:
            return [LookAgain()]
        self._move(Phase.STARTING)
        self.pending, self.failed, self.winding = event.start, None, None
        return []

    def _look_again_or_refuse(self, event: StartAsked) -> list[Instruction]:
        return [LookAgain()] if event.seen != self.generation else self._refused(event)

    def _take_into_use(self, event: SchedulerAnswered) -> list[Instruction]:
        """Its services run beside it from now on; refused, they stop."""
        if self.pending is not event.start:
            given = tuple(service for _, service in event.services)
            return [*self._refused(event, "the start is no longer under way"), *_stopping(given)]
        event.cluster.attached.update(event.services)
        return [*self._use(event.cluster), TakeIntoUse(event.start, event.cluster)]

    def _swap_service(self, event: SwapService) -> list[Instruction]:
        """The service a role had stops; one offered for a cluster no longer in use stops at once."""
        cluster, new = self.cluster, event.service
        offered = () if new is None else (new,)
        if cluster is None or cluster is not event.cluster:
            return [*self._refused(event, "the cluster is no longer in use"), *_stopping(offered)]
        old = cluster.attached.get(event.role)
        if event.only_if is not None and old is not event.only_if:
            return [*self._refused(event, "another service does it now"), *_stopping(offered)]
        if new is None:
            cluster.attached.pop(event.role, None)
        else:
            cluster.attached[event.role] = new
        return _stopping(() if old is None or old is new else (old,))

    def _detach_all(self) -> list[Instruction]:
        """The cluster in use is let go: everything beside it stops."""
        cluster = self.cluster
        if cluster is None:
            return []
        services = tuple(cluster.services())
        cluster.attached.clear()
        return _stopping(services)

    def _start_ready(self, event: WorkersReady) -> list[Instruction]:
        if self.pending is not event.start:
            return self._refused(event, "the start is no longer under way")
        self._move(Phase.IN_USE)
        self.pending = None
        return [StartReady(event.start, self.cluster, event.elapsed), *self._settled()]

    def _settled(self) -> list[Instruction]:
        """In use again: an idle watch that waited for the start or change watches again."""
        watch, self.idle_waiting = self.idle_waiting, None
        return [] if watch is None else [WatchAgain(watch)]

    def _start_failed(self, event: StartEnded) -> list[Instruction]:
        if self.pending is not event.start:
            return self._refused(event, "the start is no longer under way")
        self._move(Phase.IDLE)
        self.pending = None
        if event.failed:
            self.failed = event.start
        return [*self._detach_all(), *self._use(None)]

    def _stopped_start_ended(self, event: StartEnded) -> list[Instruction]:
        return self._wound_down(CloseEnded(event.start)) if self.winding is event.start else self._refused(event)

    def _begin_change(self, event: ChangeAsked) -> list[Instruction]:
        if self.cluster is not event.cluster:
            return self._refused(event, "the cluster it changes is no longer in use")
        self._move(Phase.CHANGING)
        self.pending = event.change
        return []

    def _change_refused(self, event: ChangeAsked) -> list[Instruction]:
        if self.cluster is not event.cluster:
            return self._refused(event, "the cluster it changes is no longer in use")
        assert self.pending is not None
        return self._refused(event, f"the cluster is {self.pending.verb} already")

    def _change_parked(self, event: ChangeAsked) -> list[Instruction]:
        """A restart or scale asks the workers: a parked cluster resumes first."""
        cluster = self.cluster
        if cluster is None or cluster is not event.cluster:
            return self._refused(event, "the cluster it changes is no longer in use")
        if cluster.parked is None:  # its park is under way
            return self._refused(event)
        return [ResumeFirst(cluster)]

    def _ask_workers(self, event: AdaptAsked | FreeAsked) -> list[Instruction]:
        """Adapt and free ask the workers: a parked cluster resumes first; otherwise they go ahead."""
        cluster = self.cluster
        if cluster is None or cluster is not event.cluster:
            return self._refused(event, "the cluster is no longer in use")
        return [] if self.phase is not Phase.PARKED or cluster.parked is None else [ResumeFirst(cluster)]

    def _change_ended(self, event: ChangeEnded) -> list[Instruction]:
        if self.pending is not event.change:
            return self._refused(event, "the change is no longer under way")
        self._move(Phase.IN_USE)
        self.pending = None
        return self._settled()

    def _park(self, event: ParkAsked) -> list[Instruction]:
        if self.cluster is not event.cluster:
            return self._refused(event, "the cluster it parks is no longer in use")
        self._move(Phase.PARKED)
        self.parking = event.done
        return []

    def _workers_moved(self, event: WorkersMoved) -> list[Instruction]:
        """Parked: what the park holds is kept; running again (resumed, or a failed park undone): IN_USE."""
        if self.cluster is not event.cluster:
            return self._refused(event, "the cluster is no longer in use")
        event.cluster.parked = event.parked
        self.parking = None  # the park ended (its verb says so to those waiting)
        if event.parked is None:
            self._move(Phase.IN_USE)
            self.resuming = None
        return []

    def _resume(self, event: ResumeAsked) -> list[Instruction]:
        """One resume at a time: who asks while one is under way waits for it; who asks while the park is still under
        way waits for the park, then asks again."""
        if self.cluster is event.cluster and event.cluster.parked is None and self.parking is not None:
            return [JoinPark(self.parking)]
        if self.cluster is not event.cluster or event.cluster.parked is None:
            return self._refused(event, "its workers are not parked")
        if self.resuming is not None:
            return [JoinResume(self.resuming)]
        self.resuming = event.done
        return [ResumeWorkers(event.cluster, event.done)]

    def _resume_failed(self, event: ResumeFailed) -> list[Instruction]:
        if self.cluster is not event.cluster or self.resuming is None:
            return self._refused(event, "no resume is under way")
        self.resuming = None
        return []

    def _park_idle(self, event: IdleFor) -> list[Instruction]:
        if self.cluster is not event.cluster:
            return self._refused(event, "the cluster is no longer in use")
        return [ParkIdle(event.cluster)]

    def _idle_deferred(self, event: IdleFor) -> list[Instruction]:
        """The scheduler can be idle while workers come: the watch waits for the start or change to end."""
        if self.cluster is not event.cluster:
            return self._refused(event, "the cluster is no longer in use")
        self.idle_waiting = event.watch
        return []

    def _stop_nothing(self, event: StopAsked) -> list[Instruction]:
        """Nothing to stop; a failed start not yet said is let go (the stop answers it)."""
        self.failed = None
        return []

    def _stop_start(self, event: StopAsked) -> list[Instruction]:
        self.failed = None
        if event.only is not None and self.cluster is not event.only:
            return []
        start = self.pending
        assert start is not None
        self._move(Phase.CLOSING)
        self.pending, self.winding, self.idle_waiting = None, start, None
        return [CancelStart(start), *self._detach_all(), *self._use(None)]

    def _stop_cluster(self, event: StopAsked) -> list[Instruction]:
        self.failed = None
        cluster = self.cluster
        if cluster is None or (event.only is not None and cluster is not event.only):
            return []
        if event.keep and not cluster.manager.keepable:
            return [KeepRefused(cluster)]
        during = self.pending
        self._move(Phase.CLOSING)
        self.pending, self.winding, self.idle_waiting, self.resuming, self.parking = None, None, None, None, None
        return [CloseCluster(cluster, during), *self._detach_all(), *self._use(None)]

    def _stop_parked(self, event: StopAsked) -> list[Instruction]:
        """A parked cluster resumes first, so its workers end as usual (where that failed: it closes all the same)."""
        cluster = self.cluster
        elsewhere = event.only is not None and event.only is not cluster
        if event.resumed or elsewhere or cluster is None or cluster.parked is None:
            return self._stop_cluster(event)
        return [ResumeFirst(cluster)]

    def _close_began(self, event: CloseBegan) -> list[Instruction]:
        if self.winding is not None:
            return self._refused(event, "a close is under way already")
        self.winding = event.closing
        return []

    def _wound_down(self, event: CloseEnded) -> list[Instruction]:
        if event.ended is not None and self.winding not in (event.ended, None):
            return self._refused(event, "another close is under way")
        self._move(Phase.IDLE)
        self.winding = None
        return []


def _stopping(services: tuple[Service, ...]) -> list[Instruction]:
    return [StopServices(services)] if services else []


E = TypeVar("E", bound=Event)
Row = Callable[[KernelCluster, E], list[Instruction]]
TABLE: dict[tuple[Phase, type[Event]], Row[Event]] = {}


def _rows(event: type[E], row: Row[E], *phases: Phase) -> None:
    for phase in phases:
        TABLE[(phase, event)] = row  # type: ignore[assignment]  # looked up by the event's own type


P = Phase
_rows(StartAsked, KernelCluster._begin_start, P.IDLE, P.CLOSING)
_rows(StartAsked, KernelCluster._look_again_or_refuse, P.STARTING, P.IN_USE, P.CHANGING, P.PARKED)
_rows(SchedulerAnswered, KernelCluster._take_into_use, *Phase)  # elsewhere refused: what it offered stops
_rows(WorkersReady, KernelCluster._start_ready, P.STARTING)
_rows(StartEnded, KernelCluster._start_failed, P.STARTING)
_rows(StartEnded, KernelCluster._stopped_start_ended, P.CLOSING)
_rows(ChangeAsked, KernelCluster._begin_change, P.IN_USE)
_rows(ChangeAsked, KernelCluster._change_refused, P.CHANGING)
_rows(ChangeAsked, KernelCluster._change_parked, P.PARKED)
_rows(ChangeEnded, KernelCluster._change_ended, P.CHANGING)
_rows(AdaptAsked, KernelCluster._ask_workers, P.STARTING, P.IN_USE, P.CHANGING, P.PARKED)
_rows(FreeAsked, KernelCluster._ask_workers, P.STARTING, P.IN_USE, P.CHANGING, P.PARKED)
_rows(ParkAsked, KernelCluster._park, P.IN_USE)
_rows(WorkersMoved, KernelCluster._workers_moved, P.PARKED)
_rows(ResumeAsked, KernelCluster._resume, P.PARKED)
_rows(ResumeFailed, KernelCluster._resume_failed, P.PARKED)
_rows(IdleFor, KernelCluster._park_idle, P.IN_USE)
_rows(IdleFor, KernelCluster._idle_deferred, P.STARTING, P.CHANGING)
_rows(StopAsked, KernelCluster._stop_nothing, P.IDLE, P.CLOSING)
_rows(StopAsked, KernelCluster._stop_start, P.STARTING)
_rows(StopAsked, KernelCluster._stop_cluster, P.IN_USE, P.CHANGING)
_rows(StopAsked, KernelCluster._stop_parked, P.PARKED)
_rows(SwapService, KernelCluster._swap_service, *Phase)
_rows(CloseBegan, KernelCluster._close_began, P.CLOSING)
_rows(CloseEnded, KernelCluster._wound_down, P.CLOSING)


def require(instructions: list[Instruction]) -> list[Instruction]:
    """``instructions``, where the event was not refused (else ``PhaseRefused`` with the refusal's words)."""
    for instruction in instructions:
        if isinstance(instruction, Refused):
            raise PhaseRefused(instruction.why)
    return instructions


def describe() -> str:
    """The table as ``docs/explanation/architecture.md`` shows it: each phase, and what each event it takes does
    there (its row's name); any other event is refused."""
    lines = ["| phase | event: its row (any other event is refused) |", "|---|---|"]
    for phase in Phase:
        rows = [
            f"`{event.__name__}`: {row.__name__.strip('_').replace('_', ' ')}"
            for (at, event), row in TABLE.items()
            if at is phase
        ]
        lines.append(f"| {phase.value} | {'; '.join(rows)} |")
    return "\n".join(lines)
