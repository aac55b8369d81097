"""Describing the cluster in use for ``%gpucluster``: the scheduler's view joined with the workers' reports.

``read`` is the one read at the end of a verb: the scheduler's workers and the manager's jobs, asked once, into
one ``ClusterState`` from which the output (``describe``), the record (``control.record_writer``) and the status
are made."""

from __future__ import annotations

import dataclasses
from typing import Any

from gpu_magics.cluster.dashboard import links
from gpu_magics.cluster.info import ClusterInfo, JobInfo, KernelGpuInfo, WorkerGpu, WorkerInfo
from gpu_magics.cluster.reading import inspection
from gpu_magics.cluster.reading.running import ActiveCluster
from gpu_magics.cluster.records import kernel_report
from gpu_magics.text.units import dropped


@dataclasses.dataclass(frozen=True)
class ClusterState:
    """The cluster's workers (the scheduler's view, and what the kernel learnt of each) and the jobs behind them,
    read once."""

    workers: dict[str, dict[str, Any]]
    infos: tuple[WorkerInfo, ...]
    jobs: tuple[JobInfo, ...]


def read(current: ActiveCluster, workers: dict[str, dict[str, Any]] | None = None) -> ClusterState:
    """Ask the scheduler for the workers (unless given) and the manager for its jobs, once."""
    if workers is None:
        workers = inspection.scheduler_workers(current.client)
    infos = inspection.worker_infos(workers, current.devices, gpu=current.manager.declared_workers != "cpu")
    return ClusterState(workers, infos, jobs(current, workers, infos))


def describe(current: ActiveCluster, state: ClusterState | None = None, notice: str | None = None) -> ClusterInfo:
    """What ``%gpucluster`` shows of ``current``: its scheduler's workers (read unless given), with the GPUs
    each reports about itself, and the dashboard link as the browser can open it."""
    if state is None:
        state = read(current)
    workers = state.workers
    reported = current.telemetry.worker_gpus() if current.telemetry is not None else {}
    infos = tuple(_with_reports(info, reported.get(info.address)) for info in state.infos)
    if current.parked is not None:  # the scheduler sees them running: their GPU work is parked
        infos = tuple(dataclasses.replace(info, status="parked") for info in infos)
    link = links.for_kernel(inspection.dashboard_link(current.client))
    manager = current.manager
    return ClusterInfo(
        name=current.name,
        kind=current.kind,
        scheduler_address=inspection.scheduler_address(current.client),
        dashboard_url=link.url,
        hardware=inspection.hardware(
            manager.declared_workers, current.devices, workers, reported, manager.hardware_note
        ),
        workers=infos,
        ready_s=current.ready_s,
        warm_s=current.warm_s,
        notice=notice,
        started_at=current.started_at,
        up_since=manager.since,
        dashboard_note=link.note,
        idle_timeout=current.idle.timeout if current.idle is not None else None,
        idle_left=current.idle.left() if current.idle is not None else None,
        **_park_figures(current),
        kernel_gpus=kernel_gpus(),
        manager=manager.label,
        jobs=with_gpus(state.jobs, infos),
        adaptive=manager.adaptive,
        figures_age=current.telemetry.reports_age() if current.telemetry is not None else None,
        facts=current.facts,
    )


def _park_figures(current: ActiveCluster) -> dict[str, Any]:
    """``park_after`` and the time left until an idle park (where its workers can park), and whether parked."""
    idle_park, parked = current.idle_park, current.parked is not None
    if idle_park is None or not current.manager.park_targets():
        return {"parked": parked}
    return {"park_after": idle_park.after_s, "park_left": None if parked else idle_park.left(), "parked": parked}


def jobs(
    current: ActiveCluster, workers: dict[str, dict[str, Any]], infos: tuple[WorkerInfo, ...]
) -> tuple[JobInfo, ...]:
    """The batch jobs behind ``current``'s workers, each with the GPUs its workers reported (none without a
    manager, or when the queue does not answer)."""
    try:
        found = current.manager.jobs(workers)
    except Exception as error:  # the queue may fail any way: no jobs shown
        dropped("listing the cluster's jobs", error)
        return ()
    return with_gpus(found, infos)


def with_gpus(found: tuple[JobInfo, ...], infos: tuple[WorkerInfo, ...]) -> tuple[JobInfo, ...]:
    by_name = {info.name: info for info in infos}
    return tuple(dataclasses.replace(job, gpus=_gpus(by_name, job.workers)) for job in found)


def _gpus(by_name: dict[str, WorkerInfo], names: tuple[str, ...]) -> tuple[str, ...]:
    gpus: list[str] = []
    for name in names:
        info = by_name.get(name)
        if info is None:
            continue
        if info.gpus:
            gpus += [f"{gpu.name} ({gpu.label})" for gpu in info.gpus]
        elif info.gpu_name:
            gpus.append(info.gpu_name + (f" (GPU {info.gpu_device})" if info.gpu_device else ""))
    return tuple(gpus)


def kernel_gpus() -> tuple[KernelGpuInfo, ...]:
    """What this kernel holds on its GPUs, as ``%gpucluster status`` shows it."""
    return tuple(
        KernelGpuInfo(
            label=f"GPU {gpu.index}",
            process_memory=gpu.held.total,
            array_memory=gpu.held.arrays,
            cached_memory=gpu.held.cached,
            context_memory=gpu.held.context,
        )
        for gpu in kernel_report.kernel_memory()
    )


def _with_reports(info: WorkerInfo, reported: tuple[str, tuple[WorkerGpu, ...]] | None) -> WorkerInfo:
    if reported is None:
        return info
    host, devices = reported
    first = devices[0] if devices else None
    return dataclasses.replace(
        info,
        host=host,
        gpus=devices,
        gpu_name=info.gpu_name or (first.name if first else None),
        gpu_memory_used=first.memory_used if first and first.memory_used is not None else info.gpu_memory_used,
        gpu_memory_total=info.gpu_memory_total or (first.memory_total if first else None),
    )
