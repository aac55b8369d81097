"""What one refresh of the ``/metrics`` figures reads, on a worker thread (never on a scrape): the kernels' and
clusters' records, NVML's process lists mapped to their kernels (``owners``), and which of those processes are SPMD
ranks. Only the records of kernels this server runs count (the runtime directory holds every kernel's of the user:
another server exports its own). A record that cannot be used (truncated, hostile) is left out alone; the rest
still counts."""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from gpu_magics.arrays.caps.cap import MemoryCap
from gpu_magics.cluster.records.record import ClusterRecord, list_kernel_records, list_records
from gpu_magics.monitor.models import GpuReading, Snapshot
from gpu_magics.server.leftovers.registry import Leftover
from gpu_magics.server.ownership.kernels import ours
from gpu_magics.server.ownership.memory_caps import with_caps
from gpu_magics.server.ownership.owners import GpuHolder, map_owners, psutil_ancestry, with_self_reports

_log = logging.getLogger(__name__)
RANK_MODULE = "gpu_magics.spmd.rank"  # a rank process's command line: python -u -m gpu_magics.spmd.rank ...
MAX_RECORDS = 1000  # records read per refresh (each kernel writes one or two)


@dataclass(frozen=True)
class Holding:
    """Bytes one process holds on one GPU, and which part of its kernel's work it is."""

    holder: GpuHolder
    part: str  # "kernel", "workers", "ranks" or "children" (other processes a kernel started)


@dataclass(frozen=True)
class Inputs:
    """Everything a frame is built from, read at ``time``."""

    time: float
    snapshot: Snapshot | None
    busiest: Mapping[str, float | None]  # this server's GPU UUID -> highest utilization (%) since the last refresh
    remote: tuple[tuple[str, Mapping[str, Any]], ...]  # (host label, a worker's GPU as its record holds it)
    records: tuple[ClusterRecord, ...]
    holdings: tuple[Holding, ...]
    paths: Mapping[str, str]  # kernel id -> notebook path
    managed: frozenset[str]  # the kernels this server runs
    leftovers: tuple[Leftover, ...] = ()  # processes on the GPUs whose kernel has ended


def gather(
    snapshot: Snapshot | None,
    history: Iterable[Snapshot],
    kernel_pids: Mapping[int, str],
    paths: Mapping[str, str],
    managed: frozenset[str],
    leftovers: Callable[[Snapshot | None], list[Leftover]] | None = None,
    server_cap: MemoryCap | None = None,
) -> Inputs:
    """Read the records and the processes' ancestry (files and ``/proc``: call off the event loop)."""
    now = time.time()
    records = ours(list_records(clean=False), managed)[:MAX_RECORDS]
    kernels = ours(list_kernel_records(clean=False), managed)[:MAX_RECORDS]
    chains: dict[int, list[int]] = {}

    def ancestry(pid: int) -> list[int]:
        if pid not in chains:
            chains[pid] = psutil_ancestry(pid)
        return chains[pid]

    holders = map_owners(snapshot, kernel_pids=kernel_pids, records=records, paths=paths, ancestry=ancestry)
    usable = []
    for record in records:
        try:
            holders = with_self_reports(holders, [record], paths, snapshot)
            usable.append(record)
        except (ValueError, TypeError, KeyError, AttributeError) as error:  # members not as a kernel writes them
            _log.debug("gpu_magics metrics: cluster record %s left out: %r", record.filename, error)
    for kernel in kernels:
        try:
            holders = with_self_reports(holders, [], paths, snapshot, [kernel])
        except (ValueError, TypeError, KeyError, AttributeError) as error:  # gpus not as a kernel writes them
            _log.debug("gpu_magics metrics: kernel record %s left out: %r", kernel.filename, error)
    holders = with_caps(holders, server_cap, snapshot, kernels)  # each notebook's cap on its rows
    workers = _worker_pids(usable)
    ranks = _RankFinder()
    holdings = tuple(Holding(holder, _part(holder, workers, ancestry, ranks)) for holder in holders)
    return Inputs(
        time=now,
        snapshot=snapshot,
        busiest=busiest(history, snapshot),
        remote=tuple(_remote_gpus(usable)),
        records=tuple(usable),
        holdings=holdings,
        paths=dict(paths),
        managed=managed,
        leftovers=tuple(leftovers(snapshot)) if leftovers is not None else (),
    )


def busiest(history: Iterable[Snapshot], latest: Snapshot | None) -> dict[str, float | None]:
    """Each GPU's highest utilization over ``history`` (and ``latest``); ``None`` where it was never read."""
    found: dict[str, float | None] = {}
    for snapshot in [*history, *([latest] if latest is not None else [])]:
        for reading in snapshot.gpus:
            value = _utilization(reading)
            before = found.get(reading.uuid)
            found[reading.uuid] = value if before is None else (before if value is None else max(before, value))
    return found


def _utilization(reading: GpuReading) -> float | None:
    value = reading.gpu_util
    if reading.error is not None or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(value)


def _worker_pids(records: Iterable[ClusterRecord]) -> dict[str, frozenset[int]]:
    """Kernel id -> the pids of its clusters' workers, as they reported them."""
    pids: dict[str, set[int]] = {}
    for record in records:
        for member in record.members:
            pid = member.get("pid")
            if member.get("role") == "worker" and isinstance(pid, int):
                pids.setdefault(record.kernel_id or "", set()).add(pid)
    return {kernel: frozenset(found) for kernel, found in pids.items()}


def _remote_gpus(records: Iterable[ClusterRecord]) -> list[tuple[str, Mapping[str, Any]]]:
    """Every GPU the clusters' workers reported, with the worker's host label (newest report first)."""
    found = []
    for record in records:
        for member in record.members:
            if member.get("role") != "worker":
                continue
            stamp = member.get("time")
            for gpu in member.get("gpus") or ():
                if isinstance(gpu, dict) and isinstance(gpu.get("uuid"), str):
                    when = float(stamp) if isinstance(stamp, int | float) else 0.0
                    found.append((when, str(member.get("host_label") or ""), gpu))
    found.sort(key=lambda entry: -entry[0])
    return [(host, gpu) for _, host, gpu in found]


class _RankFinder:
    """Whether a process is an SPMD rank (its command line), asked once per process per refresh."""

    def __init__(self) -> None:
        self._known: dict[int, bool] = {}

    def __call__(self, pid: int) -> bool:
        if pid not in self._known:
            self._known[pid] = _is_rank(pid)
        return self._known[pid]


def _is_rank(pid: int) -> bool:
    import psutil

    try:
        return RANK_MODULE in psutil.Process(pid).cmdline()
    except psutil.Error:
        return False


def _part(holder: GpuHolder, workers: Mapping[str, frozenset[int]], ancestry: Any, is_rank: _RankFinder) -> str:
    """ "ranks" for a rank process and its children (DataLoader workers), "workers" for a cluster's worker and its
    children, "children" for other processes a kernel started. Where the workers have not reported (telemetry off),
    what descends from a kernel with a cluster counts as its workers'."""
    if holder.role == "kernel":
        return "kernel"
    if holder.host is not None:  # a worker on another host, from its own report
        return "workers"
    known = workers.get(holder.kernel_id or "", frozenset())
    for pid in ancestry(holder.pid) or [holder.pid]:
        if is_rank(pid):
            return "ranks"
        if pid in known:
            return "workers"
    return "workers" if holder.role == "worker" and not known else "children"
