"""In a rank process, at a park (``%gpucluster park``, between cells): its torch process group ended (the next SPMD
cell makes it again in this process, variables kept), then its torch tensors' GPU memory copied to host memory and
freed, so that the driver's checkpoint that follows moves only what is left (the CUDA context). At the resume, once
the driver restored the process, the data is copied back.

Each tensor keeps its identity: its storage is emptied in place (``resize_(0)``, as PyTorch's FSDP frees a
parameter) and given its memory back at the resume, so views, modules, optimizers and every name that holds them see
the same tensors afterwards. The copies go through one host buffer touched by many threads and pinned in one call,
on several streams (about 20 times the driver's pace). Storages that cannot be emptied (memory another library
lent torch) and small ones stay for the driver. Standard library and torch only; nothing where torch never used
CUDA here.
"""

from __future__ import annotations

import concurrent.futures
import ctypes
import gc
import os
import sys
import time
import warnings
from typing import Any

MIN_BYTES = 1 << 20  # smaller storages stay: the driver moves them with the context
ALIGN = 4096
STREAMS = 4
_parked: list[tuple[Any, Any]] = []  # (storage emptied here, its bytes in host memory), until the resume
_buffer: list[Any] = []  # the host buffer they lie in


def park() -> dict[str, Any]:
    """End the torch group; copy the tensors' GPU memory to host memory and free it:
    ``{"bytes", "seconds", "group", "steps"}`` (``group``: the backend of the group ended, or ``None``)."""
    began = time.perf_counter()
    steps: dict[str, float] = {}
    group = _end_group()
    steps["end the group"] = time.perf_counter() - began
    moved = _offload(steps) if _cuda_used() else 0
    return {"bytes": moved, "seconds": time.perf_counter() - began, "group": group, "steps": steps}


def unpark() -> dict[str, Any]:
    """Copy back what the last park holds: ``{"bytes", "seconds", "steps"}``."""
    began = time.perf_counter()
    steps: dict[str, float] = {}
    moved = _reload(steps) if _parked else 0
    return {"bytes": moved, "seconds": time.perf_counter() - began, "steps": steps}


def held_bytes() -> int:
    """What a park would copy (the host memory it needs)."""
    return sum(-(-storage.nbytes() // ALIGN) * ALIGN for storage in _storages()) if _cuda_used() else 0


def _end_group() -> str | None:
    dist = sys.modules.get("torch.distributed")
    if dist is None or not dist.is_available() or not dist.is_initialized():
        return None
    from gpu_magics.spmd.rank import collectives

    backend = str(dist.get_backend())
    collectives.end_for_remake()
    return backend


def _cuda_used() -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and torch.cuda.is_initialized()


def _storages() -> list[Any]:
    """Every CUDA storage of this process's live tensors that can be emptied, once each, biggest first."""
    import torch

    found: dict[int, Any] = {}
    with warnings.catch_warnings():  # asking some objects of other libraries for their type warns
        warnings.simplefilter("ignore")
        tensors = [obj for obj in gc.get_objects() if isinstance(obj, torch.Tensor)]
    for obj in tensors:
        if obj.is_cuda and obj.layout == torch.strided:
            storage = obj.untyped_storage()
            size = storage.nbytes()
            if size >= MIN_BYTES and storage.resizable() and storage.data_ptr() not in found:
                found[storage.data_ptr()] = storage
    return sorted(found.values(), key=lambda storage: -storage.nbytes())


def _touch(size: int) -> Any:
    """``size`` bytes of fresh host memory, every page faulted in by many threads at once (one thread alone makes
    about 2.5 GB/s)."""
    import numpy as np

    host = np.empty(size, np.uint8)
    threads = max(1, min(16, os.cpu_count() or 1))
    step = -(-size // threads)
    base = host.ctypes.data
    with concurrent.futures.ThreadPoolExecutor(threads) as pool:
        list(pool.map(lambda at: ctypes.memset(base + at, 0, min(step, size - at)), range(0, size, step)))
    return host


def _pinned(host: Any) -> bool:
    import torch

    return int(torch.cuda.cudart().cudaHostRegister(host.ctypes.data, host.nbytes, 0)) == 0


def _unpin(host: Any) -> None:
    import torch

    torch.cuda.cudart().cudaHostUnregister(host.ctypes.data)


def _lap(steps: dict[str, float], step: str, since: float) -> float:
    now = time.perf_counter()
    steps[step] = steps.get(step, 0.0) + now - since
    return now


def _offload(steps: dict[str, float]) -> int:
    import torch

    if _parked:  # an earlier park's data never came back: first back
        _reload({})
    at = time.perf_counter()
    storages = _storages()
    if not storages:
        return 0
    offsets, size = [], 0
    for storage in storages:
        offsets.append(size)
        size += -(-storage.nbytes() // ALIGN) * ALIGN
    at = _lap(steps, "choose", at)
    host = _touch(size)
    at = _lap(steps, "touch", at)
    pinned = _pinned(host)
    at = _lap(steps, "pin", at)
    torch.cuda.synchronize()  # the cells' work on the data ends first
    streams = [torch.cuda.Stream() for _ in range(STREAMS)]
    copies = []
    try:
        for index, (storage, offset) in enumerate(zip(storages, offsets, strict=True)):
            into = torch.from_numpy(host[offset : offset + storage.nbytes()]).untyped_storage()
            with torch.cuda.stream(streams[index % STREAMS]):
                into.copy_(storage, non_blocking=pinned)
            copies.append((storage, into))
        torch.cuda.synchronize()
    finally:
        if pinned:
            _unpin(host)
    at = _lap(steps, "copy", at)
    moved = sum(storage.nbytes() for storage, _ in copies)  # (before the storages are emptied)
    for storage, _ in copies:
        storage.resize_(0)
    torch.cuda.empty_cache()
    _lap(steps, "free", at)
    _parked.extend(copies)
    _buffer.append(host)
    return moved


def _reload(steps: dict[str, float]) -> int:
    import torch

    at = time.perf_counter()
    host = _buffer[0] if _buffer else None
    pinned = host is not None and _pinned(host)
    at = _lap(steps, "pin", at)
    streams = [torch.cuda.Stream() for _ in range(STREAMS)]
    moved = 0
    try:
        for index, (storage, kept) in enumerate(_parked):
            storage.resize_(kept.nbytes())
            with torch.cuda.stream(streams[index % STREAMS]):
                storage.copy_(kept, non_blocking=pinned)
            moved += kept.nbytes()
        torch.cuda.synchronize()
    finally:
        if pinned:
            _unpin(host)
    _lap(steps, "copy", at)
    _parked.clear()
    _buffer.clear()
    return moved
