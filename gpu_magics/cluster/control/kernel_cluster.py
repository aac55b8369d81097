"""The kernel's one cluster (``machine.table.KernelCluster``: its phase, what it holds, the table of its
transitions), and what any thread may read of it at once. Only the owner thread changes it (``owner.post``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpu_magics.cluster.control.machine.phase import Phase
from gpu_magics.cluster.control.machine.table import KernelCluster

if TYPE_CHECKING:
    from gpu_magics.cluster.background.closing import Closing
    from gpu_magics.cluster.background.starting import Starting
    from gpu_magics.cluster.reading.running import ActiveCluster

_the = KernelCluster()


def kernel_cluster() -> KernelCluster:
    """The kernel's one cluster (``handle`` called by the owner thread only: ``owner.post``)."""
    return _the


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
