"""Who holds GPU memory: GPU processes mapped to the kernel (and notebook) that owns them.

A process belongs to a kernel when it is the kernel's process or descends from it (LocalCluster workers are
the kernel's children); failing that, when it descends from the process that wrote a cluster record, it
belongs to that record's kernel. The mapping (``map_owners``) is pure; the processes handler gathers its inputs
(kernel pids, ancestry, records).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

from gpu_magics.cluster.records import ClusterRecord
from gpu_magics.monitor.models import Snapshot

MAX_DEPTH = 32  # ancestors looked at per process

Ancestry = Callable[[int], list[int]]
"""``pid -> [pid, parent, grandparent, ...]``; just ``[pid]`` (or ``[]``) when the process cannot be seen."""


@dataclass(frozen=True)
class GpuHolder:
    """One process's memory on one GPU, and who it belongs to (``None`` where unknown)."""

    pid: int
    gpu: int
    gpu_uuid: str
    used_memory: int | None
    kernel_id: str | None
    path: str | None  # the notebook (or console) whose kernel holds it
    cluster: str | None  # the cluster name when the process is one of its workers
    role: str  # "kernel", "worker" (of a cluster), "child" (of a kernel) or "other"

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def psutil_ancestry(pid: int) -> list[int]:
    """``[pid, parent, ...]`` as psutil sees them; ``[pid]`` when the process cannot be looked at."""
    import psutil

    chain = [pid]
    try:
        process = psutil.Process(pid)
        for parent in process.parents()[:MAX_DEPTH]:
            chain.append(parent.pid)
    except psutil.Error:
        pass
    return chain


def map_owners(
    snapshot: Snapshot | None,
    *,
    kernel_pids: Mapping[int, str],
    records: Iterable[ClusterRecord],
    paths: Mapping[str, str],
    ancestry: Ancestry = psutil_ancestry,
) -> list[GpuHolder]:
    """Every process on every GPU of ``snapshot``, with its owner.

    ``kernel_pids``: kernel process id -> kernel id (kernels this server runs); ``records``: the clusters
    kernels started; ``paths``: kernel id -> notebook path (from the sessions).
    """
    if snapshot is None:
        return []
    records = list(records)
    record_by_pid = {record.pid: record for record in records}
    cluster_by_kernel = {record.kernel_id: record.name for record in records if record.kernel_id}
    chains: dict[int, list[int]] = {}
    holders = []
    for reading in snapshot.gpus:
        for process in reading.processes or ():
            chain = chains.get(process.pid)
            if chain is None:
                chain = chains[process.pid] = ancestry(process.pid) or [process.pid]
            kernel_id, role, cluster = _owner(chain, kernel_pids, record_by_pid, cluster_by_kernel)
            holders.append(
                GpuHolder(
                    pid=process.pid,
                    gpu=reading.index,
                    gpu_uuid=reading.uuid,
                    used_memory=process.used_memory,
                    kernel_id=kernel_id,
                    path=paths.get(kernel_id) if kernel_id else None,
                    cluster=cluster,
                    role=role,
                )
            )
    return holders


def _owner(
    chain: list[int],
    kernel_pids: Mapping[int, str],
    record_by_pid: Mapping[int, ClusterRecord],
    cluster_by_kernel: Mapping[str, str],
) -> tuple[str | None, str, str | None]:
    for depth, pid in enumerate(chain):
        kernel_id = kernel_pids.get(pid)
        record = record_by_pid.get(pid)
        if kernel_id is None and record is not None:
            kernel_id = record.kernel_id
        if kernel_id is None and record is None:
            continue
        if depth == 0:
            return kernel_id, "kernel", None
        cluster = record.name if record is not None else cluster_by_kernel.get(kernel_id or "")
        return kernel_id, ("worker" if cluster is not None else "child"), cluster
    return None, "other", None
