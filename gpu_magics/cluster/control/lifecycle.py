"""What the lifecycle's verbs (``verbs``: start, stop, change, free, idle, park, resume) share, and
what the magic asks of it around them: the processes a first start forks from, the start under way and the one
that failed, and the end of a verb that changed the workers. Nothing here touches a GPU at import."""

from __future__ import annotations

from gpu_magics.cluster.background.starting import StartProgress
from gpu_magics.cluster.control import kernel_cluster, record_writer
from gpu_magics.cluster.info import ClusterInfo
from gpu_magics.cluster.reading import cluster_state
from gpu_magics.cluster.reading.running import ActiveCluster
from gpu_magics.cluster.workers import forkserver
from gpu_magics.text.units import dropped


def prestart_processes() -> None:
    """Launch the server that worker processes fork from (``workers.forkserver``) and, on a host with GPUs, the
    process that starts the CUDA driver (``workers.driver_start``) ahead of a first start; a failure here only
    makes that start slower."""
    from gpu_magics.cluster.workers import driver_start

    for launch, what in ((forkserver.start_server, "the worker server"), (driver_start.start, "the CUDA driver")):
        try:
            launch()
        except (OSError, EOFError, RuntimeError, ValueError, ImportError) as error:  # a process or its pipe refused,
            # a module missing: it only makes the first start slower
            dropped(f"starting {what} ahead", error)


def unreported_start_failure() -> str | None:
    """The line of a background start that failed, if nobody said it yet (then it counts as said)."""
    failed = kernel_cluster.unreported()
    return None if failed is None else failed.take_unreported()


def start_progress() -> StartProgress | None:
    """How far the start (restart, scale) under way got (``None``: none is under way)."""
    pending = kernel_cluster.under_way()
    return None if pending is None else pending.progress()


def written_status(current: ActiveCluster, notice: str) -> ClusterInfo:
    """The end of a verb that changed the workers: one read, from which the record and the output are made."""
    state = cluster_state.read(current)
    record_writer.write_record(current, state=state)
    return cluster_state.describe(current, state, notice=notice)
