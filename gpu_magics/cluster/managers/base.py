"""The one interface the control (``cluster.control``) uses for every cluster, whatever gives its workers: a
cluster started here (``local``), a scheduler attached to (``attached``), SLURM jobs (``slurm``), the user's manager
object (``adopted``) or a Dask Gateway (``gateway``).

The contract: making a manager does nothing but keep the line's choices; ``open`` checks the line (asking the
manager's service where it must: a gateway, SLURM) before a running cluster stops; ``start`` makes the cluster and
connects (SLURM submits its jobs there), ``await_workers`` waits for them; ``scale``, ``adapt`` and ``jobs`` act on
and read the workers; ``finish`` is the one way it ends, closing it or leaving it running (``keep``); ``facts``
says what it is, for every view. The ``_`` hooks are the start skeleton's (``steps``). The defaults are those of a
Dask cluster manager object (dask-jobqueue's ``JobQueueCluster``, distributed's ``SpecCluster``, ``KubeCluster``,
``GatewayCluster``)."""

from __future__ import annotations

import abc
import contextlib
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal

from gpu_magics.cluster.info import ClusterFacts, JobInfo
from gpu_magics.cluster.options import ClusterOptions
from gpu_magics.cluster.reading import inspection
from gpu_magics.text.units import format_duration

if TYPE_CHECKING:
    from distributed import Client, LocalCluster

    from gpu_magics.cluster.background.starting import Starting

POLL_S = 0.25
JOBS_EVERY_S = 1.0  # how often a start's line reads the jobs (pending, and why) while it waits for workers


class ClusterManager(abc.ABC):
    """What gives a cluster's workers; a subclass that lacks a required member cannot be made (``TypeError``)."""

    owned = False  # whether this kernel made it (and so closes it on stop); an adopted one is only detached
    scalable = True  # whether scale and adapt act on it (an attached scheduler's workers are not ours to scale)
    background = False  # whether its start goes on while cells run (the magic returns once it is under way)
    keepable = False  # whether ``stop --keep`` may leave it running after the kernel lets go (a gateway cluster)
    hardware_note = ""  # what the hardware's line adds after the workers' count (", attached")
    since: float | None = None  # when the cluster itself started, where it ran before this kernel took it
    _start_words = "the cluster did not start"  # what a failed start says
    park_note = ""  # what the park's and the resume's lines add after the cluster's name (simulated GPUs: says so)

    def __init__(self, cluster: Any, label: str | None) -> None:
        self.cluster = cluster
        self.label = label  # what the headline calls it: "SLURMCluster", "KubeCluster", ... (None: no manager)
        self.adaptive: tuple[int, int] | None = None

    # -- open and check, start, wait for workers ------------------------------------------------------------------
    def open(self, reuse: bool = False) -> None:
        """Check the line before anything stops or starts: a one-line ``LineError`` (or ``ServiceError``) for what
        its start would fail on (a start in the background would say it only later). ``reuse``: the running cluster
        is used instead, so only what the line changes is checked. Starts nothing; ``finish`` lets go of what it
        opened."""
        del reuse  # by default nothing to check: the start says what fails

    def same_as(self, running: ClusterManager | None, address: str | None) -> bool:
        """Whether the line's cluster is the one in use or starting (its manager ``running``; ``address``: its
        scheduler's, where known): a line that names it reuses it, one that names another is refused. By default
        a cluster of the same kind (a start here while one started here runs, SLURM jobs while SLURM's run)."""
        del address
        return type(running) is type(self)

    @abc.abstractmethod
    def start(self, options: ClusterOptions, starting: Starting) -> Client:
        """Make the cluster (or find it) and return a client of its scheduler (``starting``: the start's handle,
        for a long wait to check)."""

    def await_workers(self, client: Client, options: ClusterOptions, starting: Starting) -> str | None:
        """Wait for the first workers (``starting`` hears how many joined); ``None`` when they came, else what
        they still wait for."""
        return self._wait_for_workers(client, options.start_wait, starting=starting)

    def expected_workers(self) -> int:
        """How many workers the manager asks for (its plan), where it says."""
        with contextlib.suppress(AttributeError, TypeError):  # a manager without a plan
            return len(self.cluster.plan)
        return 0

    @property
    def declared_workers(self) -> Literal["gpu", "cpu"] | None:
        """What the workers are by how they were asked for: a cluster of GPU or CPU workers started here, or
        ``--cpu-workers`` (CPU workers, whatever GPUs their host has). ``None``: only what the workers say tells
        (attached, adopted, a gateway's, SLURM jobs without ``--cpu-workers``)."""
        return None

    @property
    def workers_words(self) -> str:
        """What a start's line calls the workers it waits for ("0 of 3 workers up"): ``workers`` where the kind of
        cluster alone does not say what they are (SLURM's CPU workers too, whose count comes from their jobs)."""
        return "workers"

    parks = False  # a park can give its workers' GPUs back (``park_targets`` names them once they run)

    def park_targets(self) -> dict[str, int]:
        """The worker processes a park gives the GPUs of (worker name -> pid): those on this host that this kernel
        started; none by default (``why_not_parkable`` says why)."""
        return {}

    @property
    def why_not_parkable(self) -> str:
        """Why ``park_targets`` is empty, as the end of ``%gpucluster park``'s line."""
        return "only the GPU workers of a cluster started here can be parked; this one's workers run elsewhere"

    def workers_kind(self, devices: Mapping[str, Mapping[str, Any]]) -> Literal["gpu", "cpu"]:
        """What the workers are: as asked for, else ``gpu`` where one said it has a GPU its chunks can use."""
        declared = self.declared_workers
        if declared is not None:
            return declared
        usable = any(seen.get("gpu_name") and seen.get("cupy") is not False for seen in devices.values())
        return "gpu" if usable else "cpu"

    def settings(self) -> dict[str, Any]:
        """Dask settings to apply while the cluster lives (put back at ``stop``)."""
        return {}

    def learn(self, client: Client, devices: dict[str, dict[str, Any]], addresses: set[str]) -> None:
        """Add to ``devices`` what the workers at ``addresses`` say about their GPUs (asking them)."""
        from gpu_magics.cluster.managers import attach

        attach.learn_gpus(client, devices, addresses)

    # -- scale, adapt, jobs ---------------------------------------------------------------------------------------
    def check_scale(self, count: int, verb: str) -> None:
        """A one-line ``LineError`` where ``count`` workers cannot be (``verb``: scale or adapt)."""
        del count, verb  # by default any count: the manager's own scale says what fails

    def scale(self, client: Client, count: int, options: ClusterOptions) -> str | None:
        """Ask for ``count`` workers (adapting stops) and wait for them, or, where there were more, for the rest to
        leave; what still waits (``None``: the cluster has ``count`` workers)."""
        self._ask(count)
        notice = self._wait_for_workers(client, options.start_wait, count)
        return notice if notice is not None else self._wait_for_retired(client, options.start_wait, count)

    def _wait_for_retired(self, client: Client, wait: float, count: int) -> str | None:
        """Wait up to ``wait`` seconds until ``count`` workers are left (the manager retires the rest after it
        answered the scale); ``None`` when the others left, else one line saying how many are still retiring."""
        try:
            inspection.wait_for_count(client, count, wait)
        except TimeoutError:
            left = len(inspection.scheduler_workers(client))
            if left > count:
                return (
                    f"%gpucluster: {left - count} of {left} workers still retiring after {format_duration(wait)}; "
                    "the cluster shrinks as they close (%gpucluster status shows them)"
                )
        return None

    def adapt(self, minimum: int, maximum: int) -> None:
        """Let the manager add workers when tasks wait and give them back when idle, within the bounds."""
        self.cluster.adapt(minimum=minimum, maximum=maximum)
        self.adaptive = (minimum, maximum)

    def jobs(self, workers: dict[str, dict[str, Any]]) -> tuple[JobInfo, ...]:
        """The batch jobs behind the workers (none for managers without jobs)."""
        return ()

    # -- the end --------------------------------------------------------------------------------------------------
    @abc.abstractmethod
    def finish(self, name: str, keep: bool | None = None) -> str:
        """End this kernel's use of cluster ``name`` and say so in one line: close it (``keep`` False: its workers
        stop, its jobs leave the queue), or leave it running and let go (``keep`` True); ``None``: close it where
        it is ours, else let go. Also ends a manager that only opened, or whose start failed."""

    # -- the facts ------------------------------------------------------------------------------------------------
    @property
    @abc.abstractmethod
    def source(self) -> str:
        """Where its workers come from, in words (the cluster card's headline)."""

    @property
    @abc.abstractmethod
    def taken(self) -> str:
        """How this kernel took the cluster, before its clock."""

    @property
    @abc.abstractmethod
    def title(self) -> str:
        """What gives the workers, in a word or two (the side panel's title)."""

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
            parkable=self.owned and self.parks,
        )

    # -- the start skeleton's hooks (steps) -----------------------------------------------------------------------
    @property
    def _local_cluster(self) -> LocalCluster | None:
        """The ``LocalCluster`` started here, where this manager started one."""
        return None

    def _warm(
        self, client: Client, options: ClusterOptions, devices: dict[str, dict[str, Any]], starting: Starting
    ) -> dict[str, dict[str, Any]] | None:
        """Warm the workers (a round trip to each, then one round across the cluster); what each saw, by name
        (``None``: the start does not warm them), as what they are (``workers_kind``: as asked for, else what they
        said about their GPUs in ``devices``)."""
        from gpu_magics.cluster.workers import warmup

        seen, _ = warmup.warm_workers(client, self.workers_kind(devices))
        return seen

    def _check_started(self, seen: set[str]) -> None:
        """``StartFailed`` (or ``ServiceError``) when workers can no longer come (a job ended before its workers
        did); ``seen``: the names of the workers that have come up so far."""
        del seen  # by default workers can always still come

    def _ask(self, count: int) -> None:
        """Ask the manager for ``count`` workers (it stops adapting)."""
        adaptive = getattr(self.cluster, "_adaptive", None)  # as distributed's own widget does on Scale
        if adaptive is not None:
            adaptive.stop()  # distributed's Adaptive only stops its periodic callback
        self.cluster.scale(count)
        self.adaptive = None

    def _wait_for_workers(
        self, client: Client, wait: float, count: int | None = None, starting: Starting | None = None
    ) -> str | None:
        """Wait up to ``wait`` seconds for ``count`` workers (default: the manager's plan); ``None`` when they
        came, else one line saying how many are up and what the rest wait for. ``StartFailed`` when some can
        no longer come (``_check_started``)."""
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
            self._check_started(seen)
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


def same_address(one: str, other: str) -> bool:
    """Whether two scheduler addresses are one: the scheme added where left out, host names resolved where they
    can be (``localhost:8786`` is ``tcp://127.0.0.1:8786``)."""
    from distributed.comm.addressing import normalize_address, resolve_address

    def plain(address: str) -> str:
        try:
            return str(resolve_address(normalize_address(address)))
        except (ValueError, OSError):  # not an address distributed reads, or a host that does not resolve
            return address

    return plain(one) == plain(other)
