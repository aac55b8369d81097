"""The one interface ``lifecycle`` uses for clusters whose workers come from a cluster manager object: its own
``scale()``, ``adapt()`` and ``close()``, the jobs behind its workers, and waiting for workers that may come late."""

from __future__ import annotations

import contextlib
import time
from typing import TYPE_CHECKING, Any

from gpu_magics.cluster import inspection
from gpu_magics.cluster.info import JobInfo
from gpu_magics.display.format import format_duration

if TYPE_CHECKING:
    from distributed import Client

POLL_S = 0.25


class ClusterManager:
    """A Dask cluster manager object (anything with ``scheduler_address``, ``scale``, ``adapt``, ``close``)."""

    owned = False  # whether this kernel made it (and so closes it on stop); an adopted one is only detached

    def __init__(self, cluster: Any, label: str) -> None:
        self.cluster = cluster
        self.label = label  # what the headline calls it: "SLURMCluster", "KubeCluster", ...
        self.adaptive: tuple[int, int] | None = None

    def scale(self, count: int) -> None:
        """Ask the manager for ``count`` workers (it stops adapting)."""
        adaptive = getattr(self.cluster, "_adaptive", None)  # as distributed's own widget does on Scale
        if adaptive is not None:
            with contextlib.suppress(Exception):
                adaptive.stop()
        self.cluster.scale(count)
        self.adaptive = None

    def adapt(self, minimum: int, maximum: int) -> None:
        """Let the manager add workers when tasks wait and give them back when idle, within the bounds."""
        self.cluster.adapt(minimum=minimum, maximum=maximum)
        self.adaptive = (minimum, maximum)

    def expected_workers(self) -> int:
        """How many workers the manager has asked for (its plan), where it says."""
        with contextlib.suppress(Exception):
            return len(self.cluster.plan)
        return 0

    def jobs(self, workers: dict[str, dict[str, Any]]) -> tuple[JobInfo, ...]:
        """The batch jobs behind the workers (none for managers without jobs)."""
        return ()

    def check_started(self, seen: set[str]) -> None:
        """``UsageError`` when workers can no longer come (a job ended before its workers did); ``seen``: the
        names of the workers that have come up so far."""

    def close(self) -> None:
        """Close the manager: its workers stop, its jobs leave the queue."""
        self.cluster.close()

    def finish(self, name: str, close: bool) -> str:
        """``%gpucluster stop``: close the manager if it is ours or ``close`` says so, else leave it running."""
        if not (self.owned or close):
            return f"%gpucluster: detached from {name!r} ({self.label}); it keeps its workers (stop --close closes it)"
        self.close()
        return f"%gpucluster: stopped cluster {name!r} ({self.label}: closed)"

    def abandon(self) -> None:
        """A start failed after the manager was made: close it if it is ours."""
        if self.owned:
            with contextlib.suppress(Exception):
                self.close()

    def wait_for_workers(self, client: Client, wait: float, count: int | None = None) -> str | None:
        """Wait up to ``wait`` seconds for ``count`` workers (default: the manager's plan); ``None`` when they
        came, else one line saying how many are up and what the rest wait for. ``UsageError`` when some can
        no longer come (``check_started``)."""
        deadline = time.monotonic() + wait
        expected = self.expected_workers() if count is None else count
        seen: set[str] = set()
        while True:
            workers = inspection.scheduler_workers(client)
            seen.update(str(info.get("name", address)) for address, info in workers.items())
            self.check_started(seen)
            if len(workers) >= expected or time.monotonic() >= deadline:
                break
            time.sleep(POLL_S)
        if len(workers) >= expected:
            return None
        waiting = [job for job in self.jobs(workers) if job.state == "pending"]
        why = "; ".join(f"job {job.job_id} pending ({job.reason or 'no reason given'})" for job in waiting)
        return (
            f"%gpucluster: {len(workers)} of {expected} workers up after {format_duration(wait)}"
            + (f"; {why}" if why else "")
            + "; the cluster grows as they start (%gpucluster status shows them)"
        )
