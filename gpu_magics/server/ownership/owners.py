"""Who holds GPU memory: GPU processes mapped to the kernel (and notebook) that owns them.

A process belongs to a kernel when it is the kernel's process or descends from it (LocalCluster workers are
the kernel's children); failing that, when it descends from the process that wrote a cluster record, it
belongs to that record's kernel. Of a kernel's descendants, its cluster's workers (and what they start) are
``worker``, the rest ``child``, as ``/metrics`` tells its parts. The mapping (``map_owners``) is pure; the processes
handler gathers its inputs (kernel pids, ancestry, records).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, replace
from typing import Any

from gpu_magics.cluster.records.record import ClusterRecord, KernelRecord
from gpu_magics.monitor.availability import other_use
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
    array_memory: int | None = None  # of used_memory, as the process says: in use by arrays
    cached_memory: int | None = None  # cached by its memory pool (Free cached gives it back)
    context_memory: int | None = None  # its CUDA context and libraries
    server: str | None = None  # the URL of the Jupyter server running its kernel, where another one does
    user: str | None = None  # the account a process no kernel of the user's holds runs as, where it can be seen
    yours: bool | None = None  # whether that account is this server's (None: the process cannot be seen)
    top_names: tuple[dict[str, Any], ...] = ()  # a kernel's biggest names on this GPU, from its own record
    sm_util: float | None = None  # percent of the GPU's time its kernels ran lately, from NVML (None: not measured)
    memory_cap: int | None = None  # bytes: its notebook's cap on this GPU (``memory_caps``), None where none binds
    memory_cap_by: str | None = None  # "server" (the admin's) or "notebook" (the user's own, lower one)

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
    workers = _worker_pids(records)
    chains: dict[int, list[int]] = {}
    holders = []
    for reading in snapshot.gpus:
        for process in reading.processes or ():
            chain = chains.get(process.pid)
            if chain is None:
                chain = chains[process.pid] = ancestry(process.pid) or [process.pid]
            kernel_id, role, cluster = _owner(chain, kernel_pids, record_by_pid, cluster_by_kernel, workers)
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
                    sm_util=process.sm_util,
                )
            )
    return holders


def with_self_reports(
    holders: list[GpuHolder],
    records: Iterable[ClusterRecord],
    paths: Mapping[str, str],
    snapshot: Snapshot | None,
    kernels: Iterable[KernelRecord] = (),
) -> list[GpuHolder]:
    """``holders`` (from NVML's process lists) joined with what the kernels and their workers report about
    themselves, in the cluster records and in the kernels' own records: a row both give is marked
    "nvml+self-report" (NVML's figure kept, except a kernel's own record's, which it read with its split), a row
    only a process reports is added as "self-report"; either way the row takes the process's own split of its
    memory (arrays, cached, context). Self-reports work where NVML
    cannot tell: in containers (NVML gives host pids) and on other hosts. A GPU is this server's own when
    ``snapshot`` has its UUID (UUIDs are unique across machines)."""
    local = {reading.uuid: reading for reading in snapshot.gpus if reading.uuid} if snapshot is not None else {}
    by_key = {(holder.gpu_uuid, holder.pid): index for index, holder in enumerate(holders)}
    joined = list(holders)

    def add(gpu: Mapping[str, Any], pid: int, kernel_id: str | None, cluster: str | None, member: Any) -> None:
        held = gpu.get("process_memory")
        if not isinstance(held, int) or held <= 0:
            return
        uuid = str(gpu.get("uuid") or "")
        role = "worker" if member is not None and member.get("role") != "kernel" else "kernel"
        worker = str(member.get("name")) if member is not None and role == "worker" else None
        arrays, cached, context = (_bytes(gpu.get(key)) for key in ("array_memory", "cached_memory", "context_memory"))
        names = top_names(gpu.get("top_names")) if member is None else ()
        here = local.get(uuid)
        found = by_key.get((uuid, pid))
        if found is not None:
            before = joined[found]
            source = before.source if before.source != "nvml" else "nvml+self-report"
            if before.role == "other":  # a kernel (or worker) of the user's that this server did not start
                before = replace(before, role=role, kernel_id=kernel_id, path=paths.get(kernel_id or ""))
            if member is None:  # a kernel's own record: its total was read with its split, and as recently
                before = replace(before, used_memory=held)
            joined[found] = replace(
                before,
                source=source,
                cluster=before.cluster or cluster,
                worker=before.worker or worker,
                array_memory=arrays,
                cached_memory=cached,
                context_memory=context,
                top_names=names or before.top_names,
            )
            return
        by_key[(uuid, pid)] = len(joined)
        joined.append(
            GpuHolder(
                pid=pid,
                gpu=here.index if here is not None else int(gpu.get("nvml_index") or gpu.get("index") or 0),
                gpu_uuid=uuid,
                used_memory=held,
                kernel_id=kernel_id,
                path=paths.get(kernel_id) if kernel_id else None,
                cluster=cluster,
                role=role,
                gpu_label=here.label if here is not None else str(gpu.get("label") or ""),
                host=None if here is not None or member is None else str(member.get("host_label")),
                worker=worker,
                source="self-report",
                array_memory=arrays,
                cached_memory=cached,
                context_memory=context,
                top_names=names,
            )
        )

    for kernel in kernels:
        for gpu in kernel.gpus:
            add(gpu, kernel.pid, kernel.kernel_id, None, None)
    for record in records:
        for member in record.members:
            for gpu in member.get("gpus") or ():
                add(gpu, int(member.get("pid") or 0), record.kernel_id, record.name, member)
    return joined


MOST_NAMES = 5  # a kernel's names listed per GPU (its record says at most as many)


def top_names(value: Any) -> tuple[dict[str, Any], ...]:
    """A kernel record's names on one GPU (types.ts ITopName), the malformed ones left out."""
    if not isinstance(value, list):
        return ()
    return tuple(
        {
            "name": item["name"],
            "what": str(item.get("what") or ""),
            "bytes": item["bytes"],
            "give_back": str(item.get("give_back") or ""),
        }
        for item in value[:MOST_NAMES]
        if isinstance(item, dict) and isinstance(item.get("name"), str) and _bytes(item.get("bytes")) is not None
    )


def _bytes(value: Any) -> int | None:
    return value if isinstance(value, int) and value >= 0 else None


def others_on_gpus(snapshot: Snapshot | None, holders: Iterable[GpuHolder]) -> list[dict[str, Any]]:
    """Each of this server's GPUs on which processes that are not the user's notebooks (nor their children or
    clusters) hold memory: by NVML's process list where its pids are comparable with ours, else the memory in use
    that no process's own report explains (types.ts IOtherUse)."""
    if snapshot is None:
        return []
    holders = list(holders)
    found = []
    for reading in snapshot.gpus:
        if reading.error is not None:
            continue
        listed = None if reading.processes is None else [(p.pid, p.used_memory) for p in reading.processes]
        mine = [h for h in holders if h.gpu_uuid == reading.uuid and h.host is None and h.role != "other"]
        ours = {holder.pid: holder.used_memory for holder in mine}
        guessed = sum(1 for h in mine if h.source == "self-report" and h.context_memory is None and h.array_memory)
        use = other_use(reading.memory_used, reading.memory_total, listed, ours, unknown_contexts=guessed)
        if use is not None:
            found.append({"gpu": reading.index, "gpu_uuid": reading.uuid, "gpu_label": reading.label, **use.to_json()})
    return found


def _worker_pids(records: Iterable[ClusterRecord]) -> dict[str | int, frozenset[int]]:
    """Kernel id (else the record's pid, for a kernel without one) -> its clusters' workers' pids, as they
    reported them."""
    found: dict[str | int, set[int]] = {}
    for record in records:
        for member in record.members:
            pid = member.get("pid")
            if member.get("role") == "worker" and isinstance(pid, int) and not isinstance(pid, bool):
                found.setdefault(record.kernel_id or record.pid, set()).add(pid)
    return {key: frozenset(pids) for key, pids in found.items()}


def _owner(
    chain: list[int],
    kernel_pids: Mapping[int, str],
    record_by_pid: Mapping[int, ClusterRecord],
    cluster_by_kernel: Mapping[str, str],
    workers: Mapping[str | int, frozenset[int]],
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
        if cluster is None:
            return kernel_id, "child", None
        # where its workers reported, only they and what they start are; else what the kernel starts counts as them
        known = workers.get(kernel_id or pid, frozenset())
        if known and not known.intersection(chain[:depth]):
            return kernel_id, "child", None
        return kernel_id, "worker", cluster
    return None, "other", None
