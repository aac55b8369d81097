"""Each notebook's memory cap on each GPU, for the rows of its processes: the lower of the server's cap
(``c.GpuMagicsServer.memory_cap``) and the notebook's own (``%gpumemory --cap``, which its kernel's record says),
each on the GPU's memory."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from gpu_magics.arrays.caps.cap import CapError, MemoryCap, lower, parse_cap
from gpu_magics.cluster.records.record import KernelRecord
from gpu_magics.monitor.models import Snapshot
from gpu_magics.server.ownership.owners import GpuHolder


def with_caps(
    holders: list[GpuHolder], server_cap: MemoryCap | None, snapshot: Snapshot | None, kernels: Iterable[KernelRecord]
) -> list[GpuHolder]:
    """``holders`` with ``memory_cap`` and ``memory_cap_by`` on every row a notebook's kernel owns (its own, its
    workers', its children's) on a GPU of this server's where a cap binds; a kernel's malformed cap is left out."""
    totals: dict[str, int] = {}
    for gpu in snapshot.gpus if snapshot is not None else ():
        if gpu.uuid and gpu.memory_total:
            totals[gpu.uuid] = gpu.memory_total
    own = {kernel.kernel_id: cap for kernel in kernels if kernel.kernel_id and (cap := _own(kernel)) is not None}
    capped = []
    for holder in holders:
        total = totals.get(holder.gpu_uuid)
        if holder.kernel_id is None or holder.role == "other" or total is None:
            capped.append(holder)
            continue
        binding = lower(server_cap, own.get(holder.kernel_id), total)
        if binding is None:
            capped.append(holder)
        else:
            capped.append(replace(holder, memory_cap=binding.on(total), memory_cap_by=binding.by))
    return capped


def _own(kernel: KernelRecord) -> MemoryCap | None:
    try:
        return parse_cap(kernel.memory_cap or "", by="notebook")
    except CapError:
        return None
