"""The ``gpu_magics_*`` series of one refresh, built from what was read (``gather.Inputs``): plain data, no I/O.

A figure that cannot be measured has no series (not 0): a GPU that cannot be read, a MIG instance's utilization, a
cluster without an idle clock. Durations are kept as the time they count from, so a scrape says them up to date.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from gpu_magics.cluster.info import started_here
from gpu_magics.monitor.models import GpuReading
from gpu_magics.server.metrics.gather import Holding, Inputs
from gpu_magics.server.metrics.holds import Hold, holds
from gpu_magics.server.metrics.idle import IdleHold
from gpu_magics.server.metrics.labels import Labels, Place, clean, device, gpu_index, is_uuid
from gpu_magics.server.ownership.owners import GpuHolder

MAX_GPUS_PER_KERNEL = 256  # series of one kernel's memory kept per refresh (a hostile record cannot flood /metrics)
PARTS = ("kernel", "workers", "ranks", "children")


@dataclass(frozen=True)
class Series:
    """One sample: ``value``, or the seconds since ``since`` (counted at the scrape)."""

    labels: Labels
    value: float = 0.0
    since: float | None = None
    kernel_id: str | None = None  # the kernel it belongs to: gone from a scrape once the server no longer runs it


@dataclass(frozen=True)
class Family:
    name: str
    help: str
    series: tuple[Series, ...] = ()


@dataclass(frozen=True)
class Frame:
    """Every family of one refresh."""

    time: float
    families: tuple[Family, ...] = ()
    managed: frozenset[str] = field(default_factory=frozenset)  # kernels the server ran then
    holds: tuple[Hold, ...] = ()  # what each kernel holds, and since when on idle GPUs (the side panel's line)


HELP = {
    "gpu_magics_gpu_utilization_ratio": "Share of time a kernel ran on the GPU over the last sample (0 to 1).",
    "gpu_magics_gpu_memory_used_bytes": "GPU memory in use, by every process.",
    "gpu_magics_gpu_memory_total_bytes": "GPU memory in all.",
    "gpu_magics_gpu_power_watts": "GPU power draw.",
    "gpu_magics_kernel_gpu_memory_bytes": "GPU memory held for a Jupyter kernel, by part: the kernel itself, its "
    "cluster's workers, its SPMD ranks, other processes it started.",
    "gpu_magics_kernel_gpu_time_ratio": "Share of a GPU's time a Jupyter kernel's processes (the kernel, its "
    "cluster's workers, its SPMD ranks) ran lately, from NVML's per-process samples (0 to 1); absent where NVML "
    "cannot say (a MIG slice, a vGPU).",
    "gpu_magics_kernel_gpu_memory_cap_bytes": "The most GPU memory a Jupyter kernel's notebook may hold on a GPU, all "
    "its processes there together: the lower of the server's cap (GpuMagicsServer.memory_cap) and the notebook's own "
    "(%gpumemory --cap, label by); absent where none binds.",
    "gpu_magics_kernel_idle_hold_seconds": "Seconds a kernel's GPU memory has been held on GPUs that sat idle "
    "(0 while they are busy).",
    "gpu_magics_leftover_gpu_memory_bytes": "GPU memory held by processes a Jupyter kernel started that outlived it.",
    "gpu_magics_leftover_processes": "Processes a Jupyter kernel started that outlived it and hold GPU memory.",
    "gpu_magics_cluster_workers": "Workers of a kernel's Dask cluster.",
    "gpu_magics_cluster_gpus": "GPUs of a kernel's Dask cluster.",
    "gpu_magics_cluster_info": "A kernel's Dask cluster: its kind and whether it was started here or attached to.",
    "gpu_magics_cluster_idle_seconds": "Seconds since a kernel's Dask cluster last ran a task (0 while it runs "
    "one); only for clusters with an idle timeout.",
    "gpu_magics_cluster_parked_workers": "Workers of a kernel's Dask cluster parked (%gpucluster park): their GPUs "
    "given back, their data kept (0 while it runs).",
    "gpu_magics_cluster_parked_bytes": "GPU memory a kernel's parked Dask cluster gave back, held in host memory "
    "while it is parked (0 while it runs); NVML and the kernel's GPU memory series no longer count it.",
}


def build(
    inputs: Inputs,
    place: Place,
    idle: IdleHold,
    *,
    idle_utilization: float,
    notebook_label: bool,
) -> Frame:
    """The series of ``inputs`` (``idle`` is updated with this refresh)."""
    local = {reading.uuid: reading for reading in inputs.snapshot.gpus} if inputs.snapshot is not None else {}
    series: dict[str, list[Series]] = {name: [] for name in HELP}
    _gpus(series, local.values(), inputs.remote, place)
    held = _kernel_memory(series, inputs, local, place, notebook_label)
    _kernel_time(series, inputs, local, place, notebook_label)
    _kernel_cap(series, inputs, local, place, notebook_label)
    since = _idle_hold(series, held, inputs, idle, idle_utilization, place, notebook_label)
    _clusters(series, inputs, place)
    _leftovers(series, inputs, local, place)
    families = tuple(Family(name, HELP[name], tuple(found)) for name, found in series.items())
    return Frame(inputs.time, families, inputs.managed, holds(inputs, held, since))


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(value)


def _gpus(
    series: dict[str, list[Series]],
    local: Iterable[GpuReading],
    remote: Iterable[tuple[str, Mapping[str, Any]]],
    place: Place,
) -> None:
    seen: set[str] = set()
    for reading in local:
        if reading.error is not None:  # gone or unreadable: nothing measured
            continue
        seen.add(reading.uuid)
        ids = device(reading.uuid, {reading.uuid: reading})
        labels = (*ids, ("gpu", gpu_index(reading)), ("modelName", clean(reading.name)),
                  ("Hostname", place.hostname), *place.pod)  # fmt: skip
        utilization = _number(reading.gpu_util)
        _add(series, "gpu_magics_gpu_utilization_ratio", labels, None if utilization is None else utilization / 100)
        _add(series, "gpu_magics_gpu_memory_used_bytes", labels, _number(reading.memory_used))
        _add(series, "gpu_magics_gpu_memory_total_bytes", labels, _number(reading.memory_total))
        _add(series, "gpu_magics_gpu_power_watts", labels, _number(reading.power))
    for host, gpu in remote:  # the workers' GPUs on other hosts, as they reported them
        uuid = gpu["uuid"]
        if uuid in seen or gpu.get("error") is not None or not is_uuid(uuid):
            continue
        seen.add(uuid)
        index = gpu.get("nvml_index") if isinstance(gpu.get("nvml_index"), int) else gpu.get("index")
        labels = (("UUID", uuid), ("gpu", clean(index if isinstance(index, int) else "")),
                  ("modelName", clean(gpu.get("name") or "")), ("Hostname", clean(host)))  # fmt: skip
        utilization = _number(gpu.get("gpu_util"))
        _add(series, "gpu_magics_gpu_utilization_ratio", labels, None if utilization is None else utilization / 100)
        _add(series, "gpu_magics_gpu_memory_used_bytes", labels, _number(gpu.get("memory_used")))
        _add(series, "gpu_magics_gpu_memory_total_bytes", labels, _number(gpu.get("memory_total")))


def _add(series: dict[str, list[Series]], name: str, labels: Labels, value: float | None) -> None:
    if value is not None:
        series[name].append(Series(labels, value))


Held = dict[str, dict[tuple[str, str | None], int]]  # kernel -> (GPU UUID, host or None) -> bytes


def _kernels_holdings(inputs: Inputs) -> Iterator[tuple[str, Holding]]:
    """(the kernel's cleaned id, the holding) for each holding of a kernel's process on a GPU with a UUID."""
    for holding in inputs.holdings:
        holder = holding.holder
        if holder.kernel_id is not None and holder.role != "other" and is_uuid(holder.gpu_uuid):
            yield clean(holder.kernel_id), holding


def _kernel_memory(
    series: dict[str, list[Series]],
    inputs: Inputs,
    local: Mapping[str, GpuReading],
    place: Place,
    notebook_label: bool,
) -> Held:
    by_part: dict[tuple[str, str, str | None, str], int] = {}
    held: Held = {}
    for kernel, holding in _kernels_holdings(inputs):
        holder = holding.holder
        used = holder.used_memory
        if not isinstance(used, int) or used <= 0:
            continue
        gpus = held.setdefault(kernel, {})
        key = (holder.gpu_uuid, holder.host)
        if key not in gpus and len(gpus) >= MAX_GPUS_PER_KERNEL:
            continue
        gpus[key] = gpus.get(key, 0) + used
        where = (kernel, holder.gpu_uuid, holder.host, holding.part)
        by_part[where] = by_part.get(where, 0) + used
    for (kernel, uuid, host, part), used in sorted(by_part.items(), key=lambda item: tuple(map(str, item[0]))):
        labels = (("kernel_id", kernel), *device(uuid, local),
                  ("Hostname", place.hostname if host is None else clean(host)), ("part", part),
                  *_notebook(inputs, kernel, notebook_label), *place.pod)  # fmt: skip
        series["gpu_magics_kernel_gpu_memory_bytes"].append(Series(labels, float(used), kernel_id=kernel))
    return held


def _kernel_cap(
    series: dict[str, list[Series]],
    inputs: Inputs,
    local: Mapping[str, GpuReading],
    place: Place,
    notebook_label: bool,
) -> None:
    """Each kernel's notebook's cap on each of this host's GPUs where its processes hold memory."""
    caps: dict[tuple[str, str], tuple[int, str]] = {}
    for kernel, holder in _on_this_host(inputs, local):
        if holder.memory_cap is not None:
            caps[(kernel, holder.gpu_uuid)] = (holder.memory_cap, holder.memory_cap_by or "server")
    for (kernel, uuid), (cap, by) in sorted(caps.items()):
        labels = _here(kernel, uuid, inputs, local, place, notebook_label, ("by", by))
        series["gpu_magics_kernel_gpu_memory_cap_bytes"].append(Series(labels, float(cap), kernel_id=kernel))


def _kernel_time(
    series: dict[str, list[Series]],
    inputs: Inputs,
    local: Mapping[str, GpuReading],
    place: Place,
    notebook_label: bool,
) -> None:
    """Each kernel's share of each of this host's GPUs' time, where NVML measured its processes."""
    shares: dict[tuple[str, str], float] = {}
    for kernel, holder in _on_this_host(inputs, local):
        if holder.sm_util is not None:
            shares[(kernel, holder.gpu_uuid)] = shares.get((kernel, holder.gpu_uuid), 0.0) + holder.sm_util
    for (kernel, uuid), percent in sorted(shares.items()):
        labels = _here(kernel, uuid, inputs, local, place, notebook_label)
        series["gpu_magics_kernel_gpu_time_ratio"].append(Series(labels, min(1.0, percent / 100), kernel_id=kernel))


def _on_this_host(inputs: Inputs, local: Mapping[str, GpuReading]) -> Iterator[tuple[str, GpuHolder]]:
    """(the kernel's cleaned id, the holder) for each holding of a kernel's process on one of this host's GPUs."""
    for kernel, holding in _kernels_holdings(inputs):
        if holding.holder.host is None and holding.holder.gpu_uuid in local:
            yield kernel, holding.holder


def _here(
    kernel: str,
    uuid: str,
    inputs: Inputs,
    local: Mapping[str, GpuReading],
    place: Place,
    notebook_label: bool,
    *more: tuple[str, str],
) -> tuple[tuple[str, str], ...]:
    """The labels of a kernel's series on one of this host's GPUs, ``more`` after the host."""
    return (("kernel_id", kernel), *device(uuid, local), ("Hostname", place.hostname), *more,
            *_notebook(inputs, kernel, notebook_label), *place.pod)  # fmt: skip


def _notebook(inputs: Inputs, kernel: str, wanted: bool) -> Labels:
    return (("notebook", clean(inputs.paths.get(kernel, ""))),) if wanted else ()


def _idle_hold(
    series: dict[str, list[Series]],
    held: Held,
    inputs: Inputs,
    idle: IdleHold,
    threshold: float,
    place: Place,
    notebook_label: bool,
) -> dict[str, float | None]:
    """Kernel -> since when its memory has sat on idle GPUs (``None``: they work); unknown ones left out."""
    remote: dict[str, float | None] = {}
    for _, gpu in inputs.remote:
        remote.setdefault(str(gpu["uuid"]), _number(gpu.get("gpu_util")))
    states: dict[str, bool | None] = {}
    for kernel, gpus in held.items():
        busy = [inputs.busiest.get(uuid) if host is None else remote.get(uuid) for uuid, host in gpus]
        known = [value for value in busy if value is not None]
        states[kernel] = all(value < threshold for value in known) if len(known) == len(busy) else None
    found = idle.update(states, inputs.time)
    for kernel, since in sorted(found.items()):
        labels = (("kernel_id", kernel), *_notebook(inputs, kernel, notebook_label), *place.pod)
        series["gpu_magics_kernel_idle_hold_seconds"].append(Series(labels, 0.0, since, kernel_id=kernel))
    return found


def _clusters(series: dict[str, list[Series]], inputs: Inputs, place: Place) -> None:
    for record in inputs.records:
        kernel = clean(record.kernel_id or "")
        labels = (("kernel_id", kernel), ("cluster", clean(record.name)), *place.pod)
        owner = kernel or None
        series["gpu_magics_cluster_workers"].append(Series(labels, float(record.workers), kernel_id=owner))
        series["gpu_magics_cluster_gpus"].append(Series(labels, float(len(record.gpus)), kernel_id=owner))
        owned = started_here(record.facts, record.kind)
        info = (*labels, ("kind", clean(record.kind)), ("started_here", str(owned).lower()))
        series["gpu_magics_cluster_info"].append(Series(info, 1.0, kernel_id=owner))
        parked = record.parked or {}
        series["gpu_magics_cluster_parked_workers"].append(
            Series(labels, float(parked.get("workers", 0)), kernel_id=owner)
        )
        series["gpu_magics_cluster_parked_bytes"].append(Series(labels, float(parked.get("bytes", 0)), kernel_id=owner))
        if record.idle_timeout is not None:
            since = _number(record.idle_since)
            series["gpu_magics_cluster_idle_seconds"].append(Series(labels, 0.0, since, kernel_id=owner))


def _leftovers(series: dict[str, list[Series]], inputs: Inputs, local: Mapping[str, GpuReading], place: Place) -> None:
    """Per ended kernel and GPU: what its leftover processes hold (their kernel has ended: never left out for it)."""
    held: dict[tuple[str, str], tuple[int, set[int]]] = {}
    for leftover in inputs.leftovers:
        key = (clean(leftover.kernel_id), leftover.gpu_uuid)
        used, pids = held.get(key, (0, set()))
        held[key] = (used + (leftover.used_memory or 0), pids | {leftover.pid})
    for (kernel, uuid), (used, pids) in sorted(held.items()):
        labels = (("kernel_id", kernel), *device(uuid, local), ("Hostname", place.hostname), *place.pod)
        series["gpu_magics_leftover_gpu_memory_bytes"].append(Series(labels, float(used)))
        series["gpu_magics_leftover_processes"].append(Series(labels, float(len(pids))))
