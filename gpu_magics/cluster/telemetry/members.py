"""The cluster's GPUs as the kernel counts them: each GPU once, under the worker that computes on it
(``ClusterGpu``, ``Member``), and how one is told to ``%gpucluster status`` (``worker_gpu``) and to the discovery
record (``gpu_json``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gpu_magics.cluster.info import WorkerGpu
from gpu_magics.cluster.telemetry.reports import ReportedGpu, WorkerReport
from gpu_magics.monitor.availability import OtherUse
from gpu_magics.monitor.models import GpuReading


@dataclass(frozen=True)
class ClusterGpu:
    """One GPU of the cluster, counted once: which worker uses it and how views name it."""

    key: int  # unique in this kernel: the kernel's own GPU index where it sees the GPU, else from 1000
    host: str  # the address host of the worker
    host_label: str | None  # None when the kernel sees this GPU itself (then it is "GPU <key>")
    worker: str  # the address of the worker that uses it
    gpu: ReportedGpu

    @property
    def label(self) -> str:
        return self.reading().label

    def reading(self) -> GpuReading:
        return self.gpu.reading(index=self.key, host=self.host_label)


@dataclass(frozen=True)
class Member:
    """A worker with the GPUs it uses (each GPU under exactly one worker)."""

    report: WorkerReport
    host_label: str
    gpus: tuple[ClusterGpu, ...]
    received: float  # time.time() in the kernel when its last report came


def worker_gpu(gpu: ClusterGpu, others: OtherUse | None) -> WorkerGpu:
    reported = gpu.gpu
    return WorkerGpu(
        label=gpu.label,
        name=reported.name,
        uuid=reported.uuid,
        memory_used=reported.memory_used,
        memory_total=reported.memory_total,
        gpu_util=reported.gpu_util,
        process_memory=reported.process_memory,
        error=reported.error,
        array_memory=reported.array_memory,
        cached_memory=reported.cached_memory,
        context_memory=reported.context_memory,
        others_memory=None if others is None else others.bytes,
        others_pids=() if others is None else others.pids,
    )


def gpu_json(gpu: ClusterGpu, others: OtherUse | None = None) -> dict[str, Any]:
    """One member GPU as the record holds it (types.ts: IMemberGpu)."""
    reported = gpu.gpu
    return {
        "index": reported.index,
        "nvml_index": reported.nvml_index,
        "uuid": reported.uuid,
        "name": reported.name,
        "label": gpu.label,
        "memory_total": reported.memory_total,
        "memory_used": reported.memory_used,
        "gpu_util": reported.gpu_util,
        "process_memory": reported.process_memory,
        "process_memory_source": reported.process_memory_source,
        "error": reported.error,
        "array_memory": reported.array_memory,
        "cached_memory": reported.cached_memory,
        "context_memory": reported.context_memory,
        "others": None if others is None else others.to_json(),
    }
