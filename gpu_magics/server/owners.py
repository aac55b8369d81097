"""Who holds GPU memory: GPU processes mapped to the kernel (and notebook) that owns them.

A process belongs to a kernel when it is the kernel's process or descends from it (LocalCluster workers are
the kernel's children); failing that, when it descends from the process that wrote a cluster record, it
belongs to that record's kernel. The mapping (``map_owners``) is pure; the processes handler gathers its inputs
(kernel pids, ancestry, records).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, replace
from typing import Any

from gpu_magics.cluster.records.record import ClusterRecord
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
    gpu_label: str = ""  # "GPU 0" on this host, "gpu-node-1 · GPU 2" elsewhere
    host: str | None = None  # the host it runs on; None for this server's host
    worker: str | None = None  # the cluster worker's name, where it is one
    source: str = "nvml"  # "nvml", "self-report" or "nvml+self-report"

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
                    gpu_label=reading.label,
                )
            )
    return holders


def with_self_reports(
    holders: list[GpuHolder],
    records: Iterable[ClusterRecord],
    paths: Mapping[str, str],
    snapshot: Snapshot | None,
) -> list[GpuHolder]:
    """``holders`` (from NVML's process lists) joined with what the kernels and their workers report about
    themselves in the cluster records: a row both give is marked "nvml+self-report" (NVML's figure kept), a
    row only a process reports is added as "self-report". Self-reports work where NVML cannot tell: in
    containers (NVML gives host pids) and on other hosts. A GPU is this server's own when ``snapshot`` has its
    UUID (UUIDs are unique across machines)."""
    local = {reading.uuid: reading for reading in snapshot.gpus if reading.uuid} if snapshot is not None else {}
    by_key = {(holder.gpu_uuid, holder.pid): index for index, holder in enumerate(holders)}
    joined = list(holders)
    for record in records:
        for member in record.members:
            for gpu in member.get("gpus") or ():
                held = gpu.get("process_memory")
                if not isinstance(held, int) or held <= 0:
                    continue
                pid = int(member.get("pid") or 0)
                role = "kernel" if member.get("role") == "kernel" else "worker"
                here = local.get(str(gpu.get("uuid")))
                found = by_key.get((str(gpu.get("uuid")), pid)) if here is not None else None
                if found is not None:
                    joined[found] = replace(
                        joined[found],
                        source="nvml+self-report",
                        cluster=joined[found].cluster or record.name,
                        worker=joined[found].worker or (str(member.get("name")) if role == "worker" else None),
                    )
                    continue
                joined.append(
                    GpuHolder(
                        pid=pid,
                        gpu=here.index if here is not None else int(gpu.get("nvml_index") or gpu.get("index") or 0),
                        gpu_uuid=str(gpu.get("uuid") or ""),
                        used_memory=held,
                        kernel_id=record.kernel_id,
                        path=paths.get(record.kernel_id) if record.kernel_id else None,
                        cluster=record.name,
                        role=role,
                        gpu_label=here.label if here is not None else str(gpu.get("label") or ""),
                        host=None if here is not None else str(member.get("host_label")),
                        worker=str(member.get("name")) if role == "worker" else None,
                        source="self-report",
                    )
                )
    return joined


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
