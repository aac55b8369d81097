"""Each notebook's memory cap on each GPU, for the rows of its processes: the lower of the server's cap
(``c.GpuMagicsServer.memory_cap``, on the GPU's memory) and the one the kernel's record says it keeps to (a user's
own lower cap, ``%gpumemory --cap``)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from gpu_magics.arrays.caps.cap import MemoryCap
from gpu_magics.cluster.records.record import KernelRecord
from gpu_magics.monitor.models import Snapshot
from gpu_magics.server.ownership.owners import GpuHolder


def with_caps(
    holders: list[GpuHolder], server_cap: MemoryCap | None, snapshot: Snapshot | None, kernels: Iterable[KernelRecord]
) -> list[GpuHolder]:
    """``holders`` with ``memory_cap`` and ``memory_cap_by`` on every row a notebook's kernel owns (its own, its
    workers', its children's) on a GPU of this server's where a cap binds."""
    totals = {g.uuid: g.memory_total for g in snapshot.gpus if g.uuid and g.memory_total} if snapshot else {}
    told: dict[tuple[str, str], tuple[int, str]] = {}
    for kernel in kernels:
        for gpu in kernel.gpus:
            cap, by = gpu.get("memory_cap"), gpu.get("memory_cap_by")
            if kernel.kernel_id and isinstance(cap, int) and cap > 0 and by in ("server", "notebook"):
                told[(kernel.kernel_id, str(gpu.get("uuid") or ""))] = (cap, str(by))
    capped = []
    for holder in holders:
        total = totals.get(holder.gpu_uuid)
        if holder.kernel_id is None or holder.role == "other" or total is None:
            capped.append(holder)
            continue
        found = [told[key]] if (key := (holder.kernel_id, holder.gpu_uuid)) in told else []
        if server_cap is not None:
            found.append((server_cap.on(total), "server"))
        if not found:
            capped.append(holder)
            continue
        cap, by = min(found, key=lambda pair: pair[0])
        capped.append(replace(holder, memory_cap=cap, memory_cap_by=by))
    return capped
