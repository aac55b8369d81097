"""What ``%gpucluster`` reports about a cluster: plain frozen data, no I/O (built by ``cluster.inspection``,
rendered by ``display.cluster_view``)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Literal


@dataclass(frozen=True)
class WorkerGpu:
    """One GPU a worker uses, as the worker reported it about itself (its telemetry)."""

    label: str  # "127.0.0.2 · GPU 1": host and GPU, as every view names it
    name: str
    uuid: str
    memory_used: int | None = None
    memory_total: int | None = None
    gpu_util: float | None = None  # percent
    process_memory: int | None = None  # bytes the worker process itself holds on it, all of it
    error: str | None = None  # why it could not be read: shown as unreadable
    array_memory: int | None = None  # of process_memory: in use by arrays
    cached_memory: int | None = None  # cached by its pool (``%gpucluster free`` gives it back)
    context_memory: int | None = None  # its CUDA context and libraries
    others_memory: int | None = None  # held by processes that are not this cluster's or this kernel's
    others_pids: tuple[int, ...] = ()  # those processes, where NVML names them


@dataclass(frozen=True)
class WorkerInfo:
    """One worker as the scheduler sees it."""

    address: str
    name: str
    status: str
    threads: int
    gpu_name: str | None = None
    gpu_device: str | None = None  # the CUDA device the worker was given, where known
    gpu_memory_used: int | None = None
    gpu_memory_total: int | None = None
    host_memory_used: int | None = None
    host_memory_limit: int | None = None
    host: str | None = None  # the host as shown (hostname where unique in the cluster, else its address)
    gpus: tuple[WorkerGpu, ...] = ()  # live, from the worker's own telemetry (empty before its first report)


@dataclass(frozen=True)
class KernelGpuInfo:
    """What the kernel itself holds on one of its GPUs (its arrays, its pool's cache, its CUDA context)."""

    label: str
    process_memory: int | None
    array_memory: int | None = None
    cached_memory: int | None = None
    context_memory: int | None = None


@dataclass(frozen=True)
class JobInfo:
    """One batch job that gives the cluster workers (SLURM), as the queue and the scheduler see it."""

    job_id: str
    state: str  # the queue's word, lower case: "pending", "running", "completing", "failed", ...
    node: str | None = None  # where it runs (None while pending)
    reason: str | None = None  # why it waits (the queue's reason, "Resources", "Priority"), or None
    workers: tuple[str, ...] = ()  # the names of its workers that are up
    gpus: tuple[str, ...] = ()  # the GPUs of those workers ("NVIDIA H100 (GPU 0)"), as they reported them
    log: str | None = None  # the job's log file, where known

    def to_json(self) -> dict[str, object]:
        """As the discovery record holds it (types.ts IClusterJob)."""
        return {
            "job_id": self.job_id,
            "state": self.state,
            "node": self.node,
            "reason": self.reason,
            "workers": list(self.workers),
            "gpus": list(self.gpus),
        }


@dataclass(frozen=True)
class ClusterFacts:
    """What a cluster's manager says of it: every view (the cluster's card, the record, the side panel) reads these,
    never how the cluster was made."""

    owned: bool  # this kernel made it: stop, the idle timeout and the kernel's end close it
    ends: Literal["close", "detach"]  # what stop and the idle timeout do to it here
    scalable: bool  # scale and adapt act on its workers
    restartable: bool  # %gpucluster restart (the panel's Restart) restarts its workers from here
    source: str  # where its workers come from, in words: "started here", "attached, not started here", ...
    taken: str  # how this kernel took it, before its clock: "up since", "attached at", "adopted at", "connected at"
    title: str  # what gives the workers, in a word or two (the panel's title): "GPU cluster", "SLURM", ...
    workers: Literal["gpu", "cpu", "unknown"]  # what its workers are (GPU workers, CPU workers, not known yet)
    parkable: bool = False  # %gpucluster park (the panel's Park) gives its workers' GPUs back from here

    def to_json(self) -> dict[str, Any]:
        """As the discovery record holds it (types.ts IClusterFacts)."""
        return asdict(self)

    @classmethod
    def from_json(cls, data: Any) -> ClusterFacts | None:
        """The inverse of ``to_json``; ``None`` where ``data`` is not such a dict (a record of an older kernel)."""
        if not isinstance(data, dict):
            return None
        ends: Literal["close", "detach"] = "detach" if data.get("ends") == "detach" else "close"
        seen = data.get("workers")
        workers: Literal["gpu", "cpu", "unknown"] = "gpu" if seen == "gpu" else "cpu" if seen == "cpu" else "unknown"
        return cls(
            owned=bool(data.get("owned")),
            ends=ends,
            scalable=bool(data.get("scalable")),
            restartable=bool(data.get("restartable")),
            source=str(data.get("source") or ""),
            taken=str(data.get("taken") or "up since"),
            title=str(data.get("title") or "cluster"),
            workers=workers,
            parkable=bool(data.get("parkable")),
        )


def started_here(facts: Any, kind: str) -> bool:
    """Whether the kernel that wrote a cluster's record started that cluster: its manager's word (``facts``, as the
    record holds them), else, in a record of an older kernel without them, the one fallback on the cluster's kind
    left (an attached cluster was not started there)."""
    found = ClusterFacts.from_json(facts)
    return found.owned if found is not None else kind != "attached"


@dataclass(frozen=True)
class ClusterInfo:
    """A cluster's state at one moment."""

    name: str
    kind: str  # "gpu", "cpu", "attached", "slurm", "adopted" or "gateway"
    scheduler_address: str
    dashboard_url: str | None
    hardware: str
    workers: tuple[WorkerInfo, ...] = ()
    ready_s: float | None = None  # start until every worker answered
    warm_s: float | None = None  # warm-up on every worker
    notice: str | None = None
    started_at: float | None = None  # seconds since the epoch, when this kernel started or attached to it
    up_since: float | None = None  # when the cluster itself started, where it ran before (a gateway cluster
    # connected to): its age is told from this, and the start-up figures are the connection's
    dashboard_note: str | None = None  # why dashboard_url may not open from the browser, or None
    idle_timeout: float | None = None  # seconds without a task before it closes (attached: detaches)
    idle_left: float | None = None  # seconds left while it is idle; None while it runs a task
    park_after: float | None = None  # seconds without a task before its workers park (park_after); None: never
    park_left: float | None = None  # seconds left until that park while it is idle; None while it runs a task
    parked: bool = False  # its workers are parked (their GPUs back on the server)
    kernel_gpus: tuple[KernelGpuInfo, ...] = ()  # what this kernel holds on its GPUs
    plain_cells: str | None = None  # "plain cells: <where they run>; <the command that moves them>"
    figures_age: float | None = None  # seconds since the oldest worker's GPU figures were reported
    plain_cells_idle_gpus: bool = False  # plain cells leave the cluster's GPUs idle (said in the warning colour)
    manager: str | None = None  # what gives the workers, for --slurm and --from ("SLURMCluster", ...)
    jobs: tuple[JobInfo, ...] = ()  # the batch jobs behind the workers (--slurm)
    adaptive: tuple[int, int] | None = None  # adapt MIN MAX, while it adapts
    facts: ClusterFacts | None = None  # what its manager says of it: the views read these
