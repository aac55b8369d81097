"""The kernel's cluster's phases, a consistent view of it, a refused transition, and one entry of the machine's
log (``table.KernelCluster`` holds them; nothing here changes anything)."""

from __future__ import annotations

import dataclasses
import enum
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gpu_magics.cluster.background.closing import Closing
    from gpu_magics.cluster.background.starting import Starting
    from gpu_magics.cluster.control.machine.events import Event, Instruction
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
class Stimulus:
    """One event of the log, with the phase and generation it met and what it was answered: their types only, so
    that the log keeps no cluster, start or scheduler alive after it ended."""

    event: type[Event]
    phase: Phase
    generation: int
    instructions: tuple[type[Instruction], ...]
