"""The one interface ``lifecycle`` uses for every cluster, whatever gives its workers: a cluster started here
(``local``), a scheduler attached to (``attached``), SLURM jobs (``slurm``), the user's manager object
(``adopted``) or a Dask Gateway (``gateway``). Each is a manager with its own ``scale()``, ``adapt()`` and
``close()``, the jobs behind its workers, and the hooks of the one start and one scale skeleton (``steps``):
connect, wait for the workers, learn their GPUs, warm them. The defaults here are those of a Dask cluster manager
object (dask-jobqueue's ``JobQueueCluster``, distributed's ``SpecCluster``, ``KubeCluster``, ``GatewayCluster``)."""

from __future__ import annotations

import contextlib
import time
from typing import TYPE_CHECKING, Any

from gpu_magics.cluster.info import ClusterFacts, JobInfo
from gpu_magics.cluster.options import ClusterOptions, Kind
from gpu_magics.cluster.reading import inspection
from gpu_magics.units import dropped, format_duration

if TYPE_CHECKING:
    from distributed import Client, LocalCluster

    from gpu_magics.cluster.background.starting import Starting

POLL_S = 0.25
JOBS_EVERY_S = 1.0  # how often a start's line reads the jobs (pending, and why) while it waits for workers


class ClusterManager:
    """A Dask cluster manager object (anything with ``scheduler_address``, ``scale``, ``adapt``, ``close``)."""

    owned = False  # whether this kernel made it (and so closes it on stop); an adopted one is only detached
    start_words = "the cluster did not start"  # what a failed start says
    scalable = True  # whether scale and adapt act on it (an attached scheduler's workers are not ours to scale)
    background = False  # whether its start goes on while cells run (the magic returns once it is under way)
    keepable = False  # whether ``stop --keep`` may leave it running after the kernel lets go (a gateway cluster)
    since: float | None = None  # when the cluster itself started, where it ran before this kernel took it

    def __init__(self, cluster: Any, label: str | None) -> None:
        self.cluster = cluster
        self.label = label  # what the headline calls it: "SLURMCluster", "KubeCluster", ... (None: no manager)
        self.adaptive: tuple[int, int] | None = None

    @property
    def local_cluster(self) -> LocalCluster | None:
        """The ``LocalCluster`` started here, where this manager started one."""
        return None

    def settings(self) -> dict[str, Any]:
        """Dask settings to apply while the cluster lives (put back at ``stop``)."""
        return {}

    # -- the start skeleton's hooks (steps.start) -----------------------------------------------------------------
    def connect(self, options: ClusterOptions, starting: Starting) -> Client:
        """A client of the manager's scheduler (``starting``: the start's handle, for a long wait to check)."""
        from gpu_magics.cluster.managers import attach

        return attach.connect_manager(self.cluster, options.start_timeout)

    def await_workers(self, client: Client, options: ClusterOptions, starting: Starting) -> str | None:
        """Wait for the first workers (``starting`` hears how many joined); ``None`` when they came, else what
        they still wait for."""
        return self.wait_for_workers(client, options.start_wait, starting=starting)

    def learn(self, client: Client, devices: dict[str, dict[str, Any]], addresses: set[str]) -> None:
        """Add to ``devices`` what the workers at ``addresses`` say about their GPUs (asking them)."""
        from gpu_magics.cluster.managers import attach

        attach.learn_gpus(client, devices, addresses)

    def worker_kind(self, devices: dict[str, dict[str, Any]]) -> Kind:
        """``gpu`` or ``cpu``: what the workers are (here: what they said)."""
        return "gpu" if any(seen.get("gpu_name") for seen in devices.values()) else "cpu"

    def warms(self) -> bool:
        """Whether the start warms the workers."""
        return True

    def warm(self, client: Client, kind: Kind, starting: Starting) -> dict[str, dict[str, Any]]:
        """Warm the workers (a round trip to each, then one round across the cluster); what each saw, by name."""
        from gpu_magics.cluster.workers import warmup

        seen, _ = warmup.warm_workers(client, kind, before_cluster_round=self.before_cluster_round)
        return seen

    def before_cluster_round(self) -> None:
        """Called between the workers' own warm-up and the round across the cluster."""

    def start_failed(self, client: Client | None) -> None:
        """The start failed after ``connect`` (or during it): close what this made."""
        if client is not None:
            try:
                client.close(timeout=5)
            except Exception as error:  # a close that fails any way: the start's own error is what the user sees
                dropped("closing the client of a failed start", error)
        self.abandon()

    # -- the scale skeleton's hooks (steps.scale) -----------------------------------------------------------------
    def check_scale(self, count: int, verb: str) -> None:
        """A one-line ``UsageError`` where ``count`` workers cannot be (``verb``: scale or adapt)."""

    def resize(self, client: Client, count: int, options: ClusterOptions) -> str | None:
        """Ask for ``count`` workers and wait for them; what still waits (``None``: they came)."""
        self.scale(count)
        return self.wait_for_workers(client, options.start_wait, count)

    def scale(self, count: int) -> None:
        """Ask the manager for ``count`` workers (it stops adapting)."""
        adaptive = getattr(self.cluster, "_adaptive", None)  # as distributed's own widget does on Scale
        if adaptive is not None:
            try:
                adaptive.stop()
            except Exception as error:  # a stop that fails any way: the scale below still sets the count
                dropped("stopping the adaptive before a scale", error)
        self.cluster.scale(count)
        self.adaptive = None

    def adapt(self, minimum: int, maximum: int) -> None:
        """Let the manager add workers when tasks wait and give them back when idle, within the bounds."""
        self.cluster.adapt(minimum=minimum, maximum=maximum)
        self.adaptive = (minimum, maximum)

    def expected_workers(self) -> int:
        """How many workers the manager has asked for (its plan), where it says."""
        with contextlib.suppress(AttributeError, TypeError):  # a manager without a plan
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

    def finish(self, name: str, close: bool, keep: bool = False) -> str:
        """``%gpucluster stop``: close the manager if it is ours or ``close`` says so, else leave it running
        (``keep``: leave it running although it is ours, where ``keepable``)."""
        if not (self.owned or close):
            return f"%gpucluster: detached from {name!r} ({self.label}); it keeps its workers (stop --close closes it)"
        self.close()
        return f"%gpucluster: stopped cluster {name!r} ({self.label}: closed)"

    @property
    def source(self) -> str:
        """Where its workers come from, in words (the cluster card's headline)."""
        return f"adopted {self.label or 'cluster manager'}, not started here"

    @property
    def taken(self) -> str:
        """How this kernel took the cluster, before its clock."""
        return "adopted at"

    @property
    def title(self) -> str:
        """What gives the workers, in a word or two (the side panel's title)."""
        return self.label or "cluster manager"

    def facts(self, workers: str) -> ClusterFacts:
        """What this manager says of its cluster, for every view (``workers``: what its workers are, as learnt:
        "gpu", "cpu", or anything else for not known yet)."""
        return ClusterFacts(
            owned=self.owned,
            ends="close" if self.owned else "detach",
            scalable=self.scalable,
            restartable=self.owned,  # a restart goes through the cluster's nannies, which only its maker owns
            source=self.source,
            taken=self.taken,
            title=self.title,
            workers="gpu" if workers == "gpu" else "cpu" if workers == "cpu" else "unknown",
        )

    def discard(self) -> None:
        """Let go of a manager that started nothing (its line was only checked)."""

    def abandon(self) -> None:
        """A start failed after the manager was made: close it if it is ours."""
        if self.owned:
            try:
                self.close()
            except Exception as error:  # a close that fails any way: the start's own error is what the user sees
                dropped("closing the manager of a failed start", error)

    def wait_for_workers(
        self, client: Client, wait: float, count: int | None = None, starting: Starting | None = None
    ) -> str | None:
        """Wait up to ``wait`` seconds for ``count`` workers (default: the manager's plan); ``None`` when they
        came, else one line saying how many are up and what the rest wait for. ``UsageError`` when some can
        no longer come (``check_started``)."""
        deadline = time.monotonic() + wait
        expected = self.expected_workers() if count is None else count
        seen: set[str] = set()
        asked = time.monotonic()  # when the jobs were last read for the line (each read runs squeue)
        while True:
            workers = inspection.scheduler_workers(client)
            seen.update(str(info.get("name", address)) for address, info in workers.items())
            if starting is not None:
                if time.monotonic() - asked >= JOBS_EVERY_S and len(workers) < expected:
                    asked = time.monotonic()
                    starting.update(detail=_pending(self.jobs(workers)))
                starting.update(joined=len(workers))
                starting.check()
            self.check_started(seen)
            if len(workers) >= expected or time.monotonic() >= deadline:
                break
            time.sleep(POLL_S)
        if len(workers) >= expected:
            return None
        why = _pending(self.jobs(workers))
        return (
            f"%gpucluster: {len(workers)} of {expected} workers up after {format_duration(wait)}"
            + (f"; {why}" if why else "")
            + "; the cluster grows as they start (%gpucluster status shows them)"
        )


def _pending(jobs: tuple[JobInfo, ...]) -> str:
    """``job 12 pending (Resources); job 13 pending (Priority)``, or "" when no job waits."""
    return "; ".join(
        f"job {job.job_id} pending ({job.reason or 'no reason given'})" for job in jobs if job.state == "pending"
    )
