"""The kernel's one cluster as one object with an explicit phase; only the owner thread (``owner.change``) moves it.

::

              begin_start                 start_ready
      IDLE ───────────────▶ STARTING ─────────────────▶ IN_USE ◀──────────────┐
       ▲ ▲                   │    │                      │   │ begin_change   │ change_done,
       │ │     start_ended   │    │ claim_stop           │   ▼                │ change_ended
       │ └───────────────────┘    │                      │  CHANGING ─────────┘
       │                          ▼          claim_stop  │   │ claim_stop
       └──────────────────── CLOSING ◀───────────────────┘◀──┘◀─── PARKED
              wound_down        │ begin_start                park │   ▲ │ unpark
                                └──────────▶ STARTING     IN_USE ──┘   └──▶ IN_USE

(a new start from CLOSING waited for the close as long as it would; a stop of a PARKED cluster resumed it first).

A verb reads the phase (``view``), does its network work on its own thread, then asks the owner for the transition
it needs, naming the view it decided from: the owner refuses (``PhaseRefused``) a transition its phase does not
allow, and ``begin_start`` refuses a start when anything changed since that view (the verb looks again). So a start
racing a stop from another thread ends in one phase that both agree on. A start's cluster may be in use (its
scheduler answered) while the phase is still ``STARTING``: cells may send it tasks while its workers come. A start
that failed is kept (``failed``) until a cell or a verb said its line. ``PARKED`` is entered with ``park`` and left
with ``unpark``: the cluster's workers gave their GPUs back (``parking``), and the next work resumes them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from gpu_magics.cluster.control import owner
from gpu_magics.text.units import dropped

if TYPE_CHECKING:
    from gpu_magics.cluster.background.closing import Closing
    from gpu_magics.cluster.background.starting import Starting
    from gpu_magics.cluster.reading.running import ActiveCluster


class Phase(enum.Enum):
    """Where the kernel's cluster is."""

    IDLE = "idle"  # no cluster in use, nothing under way
    STARTING = "starting"  # a start under way (its cluster may be in use already: its scheduler answered)
    IN_USE = "in use"  # a cluster in use, nothing under way
    CHANGING = "changing"  # a restart or scale of the cluster in use under way
    CLOSING = "closing"  # a stopped start or cluster whose processes still end; a new start waits for it
    PARKED = "parked"  # the cluster in use gave its GPUs back (its data kept); the next work resumes it


class PhaseRefused(RuntimeError):
    """A transition the phase does not allow (a verb's bug, or a race it lost: it looks again)."""


@dataclasses.dataclass(frozen=True)
class View:
    """The kernel's cluster at one moment, as the owner saw it (``generation`` counts its transitions)."""

    phase: Phase
    cluster: ActiveCluster | None
    pending: Starting | None  # the start, restart or scale under way
    failed: Starting | None  # a start that failed, not said yet
    winding: Starting | Closing | None  # what a stop left to end its processes
    generation: int


@dataclasses.dataclass(frozen=True)
class StopClaim:
    """What a stop takes out, decided on the owner: a start under way to cancel, or a cluster to close (``during``:
    the restart or scale it stopped)."""

    start: Starting | None = None
    cluster: ActiveCluster | None = None
    during: Starting | None = None


class KernelCluster:
    """The phase and what it holds; each transition runs on the owner thread and says what it refuses."""

    def __init__(self) -> None:
        self.phase = Phase.IDLE
        self.cluster: ActiveCluster | None = None
        self.pending: Starting | None = None
        self.failed: Starting | None = None
        self.winding: Starting | Closing | None = None
        self.generation = 0

    def view(self) -> View:
        return View(self.phase, self.cluster, self.pending, self.failed, self.winding, self.generation)

    def _move(self, phase: Phase, allowed: tuple[Phase, ...], what: str) -> None:
        owner.require_owner(what)
        if self.phase not in allowed:
            raise PhaseRefused(f"{what}: refused while the cluster is {self.phase.value}")
        self.phase = phase
        self.generation += 1

    def _use(self, cluster: ActiveCluster | None) -> None:
        previous, self.cluster = self.cluster, cluster
        if previous is not cluster:
            owner.afterwards(lambda: _tell_listeners(cluster))  # on the verb's thread: they may talk to the workers

    # -- a start --------------------------------------------------------------------------------------------------
    def begin_start(self, handle: Starting, since: View) -> bool:
        """IDLE or CLOSING → STARTING with ``handle``, where nothing changed since ``since`` (else ``False``: the
        verb looks again). A close still under way is let go: the start waited for it as long as it would."""
        owner.require_owner("beginning a start")
        if self.generation != since.generation:
            return False
        self._move(Phase.STARTING, (Phase.IDLE, Phase.CLOSING), "beginning a start")
        self.pending, self.failed, self.winding = handle, None, None
        return True

    def take_into_use(self, handle: Starting, cluster: ActiveCluster) -> bool:
        """The start's scheduler answered: its cluster is in use (the phase stays STARTING); ``False`` where the
        start is no longer the one under way (a stop came first)."""
        owner.require_owner("taking a cluster into use")
        if self.phase is not Phase.STARTING or self.pending is not handle:
            return False
        self._use(cluster)
        return True

    def start_ready(self, handle: Starting) -> bool:
        """STARTING → IN_USE once ``handle``'s workers are up and warm; ``False`` where a stop came first."""
        owner.require_owner("ending a start")
        if self.phase is not Phase.STARTING or self.pending is not handle:
            return False
        self._move(Phase.IN_USE, (Phase.STARTING,), "ending a start")
        self.pending = None
        return True

    def start_ended(self, handle: Starting, failed: bool) -> None:
        """``handle``'s job ended without a cluster (failed, or stopped): STARTING → IDLE where it was the start
        under way (a failure is kept until said), CLOSING → IDLE where a stop waited for it to end."""
        owner.require_owner("ending a start")
        if self.pending is handle and self.phase is Phase.STARTING:
            self._move(Phase.IDLE, (Phase.STARTING,), "ending a start")
            self.pending = None
            self._use(None)
            if failed:
                self.failed = handle
        elif self.winding is handle:
            self.wound_down(handle)

    # -- a restart or a scale -------------------------------------------------------------------------------------
    def begin_change(self, handle: Starting, cluster: ActiveCluster) -> None:
        """IN_USE → CHANGING with ``handle``, for ``cluster`` (still the one in use)."""
        owner.require_owner("beginning a change")
        if self.cluster is not cluster:
            raise PhaseRefused("beginning a change: the cluster it changes is no longer in use")
        if self.phase is Phase.CHANGING and self.pending is not None:
            raise PhaseRefused(f"beginning a change: the cluster is {self.pending.verb} already")
        self._move(Phase.CHANGING, (Phase.IN_USE,), "beginning a change")
        self.pending = handle

    def change_ended(self, handle: Starting) -> bool:
        """CHANGING → IN_USE once ``handle`` ended (done or failed: the cluster stays in use); ``False`` where a stop
        came first (the change ends as stopped)."""
        owner.require_owner("ending a change")
        if self.phase is not Phase.CHANGING or self.pending is not handle:
            return False
        self._move(Phase.IN_USE, (Phase.CHANGING,), "ending a change")
        self.pending = None
        return True

    # -- a park ---------------------------------------------------------------------------------------------------
    def park(self, cluster: ActiveCluster) -> None:
        """IN_USE → PARKED for ``cluster`` (still the one in use): nothing else changes it while its workers park;
        ``unpark`` undoes it where the park fails."""
        owner.require_owner("parking")
        if self.cluster is not cluster:
            raise PhaseRefused("parking: the cluster it parks is no longer in use")
        self._move(Phase.PARKED, (Phase.IN_USE,), "parking")

    def unpark(self, cluster: ActiveCluster) -> None:
        """PARKED → IN_USE: ``cluster``'s workers run again (resumed, or their park failed and was undone)."""
        owner.require_owner("resuming")
        if self.cluster is cluster and self.phase is Phase.PARKED:
            self._move(Phase.IN_USE, (Phase.PARKED,), "resuming")
            cluster.parked = None

    # -- a stop ---------------------------------------------------------------------------------------------------
    def claim_stop(
        self, only: ActiveCluster | None = None, keep_check: Callable[[ActiveCluster], None] | None = None
    ) -> StopClaim:
        """What a stop ends, taken out at once: STARTING, IN_USE or CHANGING → CLOSING (``only``: only while that
        cluster is in use; ``keep_check`` may refuse the cluster's stop before anything changes). A failed start
        not yet said is let go: the stop answers it."""
        owner.require_owner("stopping")
        self.failed = None
        if only is not None and self.cluster is not only:
            return StopClaim()
        if self.phase is Phase.STARTING:
            start = self.pending
            self._move(Phase.CLOSING, (Phase.STARTING,), "stopping")
            self.pending, self.winding = None, start
            self._use(None)
            return StopClaim(start=start)
        if self.phase in (Phase.IN_USE, Phase.CHANGING, Phase.PARKED) and self.cluster is not None:
            if keep_check is not None:
                keep_check(self.cluster)
            cluster, during = self.cluster, self.pending
            self._move(Phase.CLOSING, (Phase.IN_USE, Phase.CHANGING, Phase.PARKED), "stopping")
            self.pending, self.winding = None, None
            self._use(None)
            return StopClaim(cluster=cluster, during=during)
        return StopClaim()

    def closing(self, closing: Closing) -> None:
        """The close of what a stop took out goes on in ``closing`` (CLOSING until it ends)."""
        owner.require_owner("closing")
        if self.phase is Phase.CLOSING and self.winding is None:
            self.winding = closing

    def wound_down(self, what: Starting | Closing | None = None) -> None:
        """CLOSING → IDLE: what the stop left (``what``; ``None``: whatever it was) ended its processes."""
        owner.require_owner("ending a close")
        if self.phase is Phase.CLOSING and (what is None or self.winding in (what, None)):
            self._move(Phase.IDLE, (Phase.CLOSING,), "ending a close")
            self.winding = None


_the = KernelCluster()


def kernel_cluster() -> KernelCluster:
    """The kernel's one cluster (its transitions on the owner thread only)."""
    return _the


def view() -> View:
    """The kernel's cluster at this moment (on any thread: one consistent read, made on the owner)."""
    return owner.change(_the.view)


def phase() -> Phase:
    return _the.phase


def in_use() -> ActiveCluster | None:
    """The cluster this kernel uses now (its start may still be under way), or ``None``."""
    return _the.cluster


def under_way() -> Starting | None:
    """The start, restart or scale under way, or ``None``."""
    return _the.pending


def unreported() -> Starting | None:
    """The start that failed and whose line no cell said yet, or ``None``."""
    failed = _the.failed
    return failed if failed is not None and failed.unreported else None


def winding_down() -> Starting | Closing | None:
    """What a stop left to end its processes (a new start waits for it), or ``None``."""
    return _the.winding


def set_figures(cluster: ActiveCluster, **figures: Any) -> None:
    """Replace what the start, a restart or a scale learnt of ``cluster`` (``ready_s``, ``warm_s``, ``devices``),
    on the owner: every reader sees the old figures or the new ones, never half of them."""
    owner.require_owner("replacing the cluster's figures")
    cluster.figures = dataclasses.replace(cluster.figures, **figures)


def set_parked(cluster: ActiveCluster, parked: Any) -> None:
    """On the owner: what ``cluster``'s park holds (``parking.Parked``), once every worker parked."""
    owner.require_owner("recording a park")
    if _the.cluster is cluster and _the.phase is Phase.PARKED:
        cluster.parked = parked


def _tell_listeners(cluster: ActiveCluster | None) -> None:
    for listener in list(_listeners):
        try:
            listener(cluster)
        except Exception as error:  # a listener never stops the lifecycle
            dropped("telling a listener of the cluster in use", error)


Listener = Callable[["ActiveCluster | None"], None]
_listeners: list[Listener] = []
_listeners_lock = threading.Lock()


def on_change(listener: Listener) -> Callable[[], None]:
    """Call ``listener`` with the new cluster (``None``: none) whenever the cluster in use changes, before the
    lifecycle undoes what the old one set; returns what removes the listener."""
    with _listeners_lock:
        _listeners.append(listener)

    def remove() -> None:
        with _listeners_lock, contextlib.suppress(ValueError):
            _listeners.remove(listener)

    return remove
