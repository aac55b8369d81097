"""What ``%gpucluster`` reports about a cluster: plain frozen data, no I/O (built by ``cluster.inspection``,
rendered by ``display.cluster_view``)."""

from __future__ import annotations

from dataclasses import dataclass


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


@dataclass(frozen=True)
class ClusterInfo:
    """A cluster's state at one moment."""

    name: str
    kind: str  # "gpu", "cpu" or "attached"
    scheduler_address: str
    dashboard_url: str | None
    hardware: str
    workers: tuple[WorkerInfo, ...] = ()
    ready_s: float | None = None  # start until every worker answered
    warm_s: float | None = None  # warm-up on every worker
    notice: str | None = None
