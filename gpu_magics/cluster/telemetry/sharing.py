"""In the kernel: which of the cluster's GPUs hold work that is neither this cluster's nor this kernel's.

From the workers' reports: the GPU's memory in use, NVML's list of processes on it (as the worker that uses it
sees it) and what each process of ours says it holds there (the workers, and this kernel where it runs on the
same host). The processes this kernel started (and theirs) are its own, as ``/metrics`` counts them
(``part="children"``): on the kernel's host, NVML's figure for each of them counts as ours.
``monitor.availability.other_use`` judges; this module only gathers its inputs.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Collection, Iterable, Mapping

from gpu_magics.cluster.telemetry.reports import ReportedGpu, WorkerReport
from gpu_magics.monitor.availability import OtherUse, other_use

KernelHeld = Callable[[], Mapping[str, tuple[int | None, bool]]]
"""GPU UUID -> (bytes this kernel holds there, whether that figure counts its CUDA context)."""
Descendants = Callable[[], Collection[int]]
"""The pids of the processes this kernel started, and theirs."""


def kernel_descendants() -> frozenset[int]:
    """The processes this kernel started, and theirs (``frozenset()`` where they cannot be looked at)."""
    import psutil

    try:
        return frozenset(child.pid for child in psutil.Process(os.getpid()).children(recursive=True))
    except psutil.Error:
        return frozenset()


def others_by_gpu(
    owners: Iterable[tuple[WorkerReport, ReportedGpu]],
    reports: Iterable[WorkerReport],
    kernel_host: Callable[[WorkerReport], bool],
    kernel_held: KernelHeld | None = None,
    descendants: Descendants = kernel_descendants,
) -> dict[tuple[str, str], OtherUse]:
    """(worker host, GPU UUID) -> what others hold there, for each GPU of ``owners`` (the worker that uses it and
    its report of it) where something says so. ``reports``: every worker's latest report (each lists what its
    process holds on every GPU it sees); ``kernel_host(report)``: whether that worker runs on this kernel's host;
    ``descendants()``: the processes this kernel started (asked once, where a GPU is on its host)."""
    reports = list(reports)
    held_here = dict(kernel_held()) if kernel_held is not None else {}
    children: Collection[int] | None = None
    found: dict[tuple[str, str], OtherUse] = {}
    for owner, gpu in owners:
        if gpu.error is not None:
            continue
        ours: dict[int, int | None] = {}
        unknown = 0
        for report in reports:
            if report.host != owner.host:
                continue
            mine = next((g for g in report.gpus if g.uuid == gpu.uuid), None)
            ours[report.pid] = mine.process_memory if mine is not None else None
            if mine is not None and mine.process_memory and mine.context_memory is None and _pooled(mine):
                unknown += 1
        if kernel_host(owner):
            held, counted = held_here.get(gpu.uuid, (None, True))
            ours[os.getpid()] = held
            unknown += 0 if counted or not held else 1
            children = descendants() if children is None else children
            for pid, used in gpu.gpu_processes or ():
                if pid in children:
                    ours.setdefault(pid, used)
        use = other_use(gpu.memory_used, gpu.memory_total, gpu.gpu_processes, ours, unknown_contexts=unknown)
        if use is not None:
            found[(owner.host, gpu.uuid)] = use
    return found


def _pooled(gpu: ReportedGpu) -> bool:
    """Whether the figure is a pool's (which leaves the context out), not NVML's for the whole process."""
    return gpu.process_memory_source not in (None, "nvml")
