"""In a rank process, at a park (``%gpucluster park``, between cells): its torch process group ended (the next SPMD
cell makes it again in this process, variables kept), then its torch tensors' GPU memory copied to host memory and
freed, so that the driver's checkpoint that follows moves only what is left (the CUDA context). The group ends while
the host buffer is made. At the resume, once the driver restored the process, the data is copied back; its buffer is
unpinned and let go on a thread after.

Each tensor keeps its identity: its storage is emptied in place (``resize_(0)``, as PyTorch's FSDP frees a
parameter) and given its memory back at the resume, so views, modules, optimizers and every name that holds them see
the same tensors afterwards. The copies go through one host buffer touched by many threads and pinned a segment at a
time, each storage's copy starting once its memory is pinned, on several streams (about 20 times the driver's pace;
the driver checkpoints pinned memory slowly, so none stays pinned while parked). Storages that cannot be emptied
(memory another library lent torch) and small ones stay for the driver. Standard library and torch only; nothing
where torch never used CUDA here.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import ctypes
import gc
import mmap
import os
import sys
import threading
import time
import warnings
from typing import Any

MIN_BYTES = 1 << 20  # smaller storages stay: the driver moves them with the context
ALIGN = 4096
STREAMS = 4
SEGMENT_BYTES = 2 << 30  # pinned this much at a time, the copies of what it holds starting meanwhile
_parked: list[tuple[Any, Any]] = []  # (storage emptied here, its bytes in host memory), until the resume
_buffer: list[Any] = []  # the host buffer they lie in
_unpinning: list[threading.Thread] = []  # the last resume's unpin, under way


def park() -> dict[str, Any]:
    """End the torch group; copy the tensors' GPU memory to host memory and free it:
    ``{"bytes", "seconds", "group", "steps"}`` (``group``: the backend of the group ended, or ``None``)."""
    began = time.perf_counter()
    steps: dict[str, float] = {}
    with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="gpu-magics-group-end") as pool:
        ending = pool.submit(_timed_group_end, steps, began)  # meanwhile the host buffer is made (no GPU work)
        moved = _offload(steps, before_copies=ending.result) if _cuda_used() else 0
        group = ending.result()
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


def _timed_group_end(steps: dict[str, float], began: float) -> str | None:
    group = _end_group()
    steps["end the group"] = time.perf_counter() - began
    return group


def _end_group() -> str | None:
    dist = sys.modules.get("torch.distributed")
    if dist is None or not dist.is_available() or not dist.is_initialized():
        return None
    from gpu_magics.spmd.rank import collectives

    backend = str(dist.get_backend())
    collectives.end_for_remake(idle=True)
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

    region = mmap.mmap(-1, max(size, 1), flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    with contextlib.suppress(AttributeError, OSError):  # huge pages where the system gives them: twice as fast
        region.madvise(mmap.MADV_HUGEPAGE)  # to touch and to pin on an H200's host (workers.host_copies)
    host = np.frombuffer(region, np.uint8, count=size)
    threads = max(1, min(16, os.cpu_count() or 1))
    step = -(-size // threads)
    base = host.ctypes.data
    with concurrent.futures.ThreadPoolExecutor(threads) as pool:
        list(pool.map(lambda at: ctypes.memset(base + at, 0, min(step, size - at)), range(0, size, step)))
    return host


def _pin(host: Any, start: int, pinned: list[int]) -> bool:
    """Pin ``host[start:start + SEGMENT_BYTES]``; whether it could (its start added to ``pinned``)."""
    import torch

    size = min(SEGMENT_BYTES, host.nbytes - start)
    if int(torch.cuda.cudart().cudaHostRegister(host.ctypes.data + start, size, 0)) != 0:
        return False
    pinned.append(host.ctypes.data + start)
    return True


def _unpin(pinned: list[int]) -> None:
    import torch

    while pinned:
        torch.cuda.cudart().cudaHostUnregister(pinned.pop())


def _copies(host: Any, pairs: list[tuple[Any, Any, int]], steps: dict[str, float]) -> list[int]:
    """Copy each ``(destination, source, host offset)`` storage pair on ``STREAMS`` streams, each once the host
    memory it uses is pinned (pinned a segment at a time meanwhile; where a pin fails, the copies from then on run
    unpinned, synchronously); what is pinned, to be unpinned once they ended."""
    import torch

    pinned: list[int] = []
    streams = [torch.cuda.Stream() for _ in range(STREAMS)]
    pinning, began = 0.0, time.perf_counter()
    ready, can_pin = 0, True
    try:
        for index, (destination, source, offset) in enumerate(pairs):
            end = offset + max(destination.nbytes(), source.nbytes())
            while can_pin and ready < end:
                started = time.perf_counter()
                can_pin = _pin(host, ready, pinned)
                pinning += time.perf_counter() - started
                ready = min(host.nbytes, ready + SEGMENT_BYTES) if can_pin else ready
            with torch.cuda.stream(streams[index % STREAMS]):
                destination.copy_(source, non_blocking=ready >= end)
        torch.cuda.synchronize()
    except BaseException:  # anything, an interrupt too: nothing stays pinned
        torch.cuda.synchronize()
        _unpin(pinned)
        raise
    steps["pin"] = steps.get("pin", 0.0) + pinning
    steps["copy"] = steps.get("copy", 0.0) + time.perf_counter() - began - pinning
    return pinned


def _lap(steps: dict[str, float], step: str, since: float) -> float:
    now = time.perf_counter()
    steps[step] = steps.get(step, 0.0) + now - since
    return now


def _offload(steps: dict[str, float], before_copies: Any = None) -> int:
    import torch

    _wait_for_unpin()
    if _parked:  # an earlier park's data never came back: first back
        _reload({})
        _wait_for_unpin()
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
    if before_copies is not None:  # the group's end, under way meanwhile
        before_copies()
    torch.cuda.synchronize()  # the cells' work on the data ends first
    into = [
        torch.from_numpy(host[offset : offset + storage.nbytes()]).untyped_storage()
        for storage, offset in zip(storages, offsets, strict=True)
    ]
    pinned = _copies(
        host, [(kept, storage, offset) for kept, storage, offset in zip(into, storages, offsets, strict=True)], steps
    )
    at = time.perf_counter()
    _unpin(pinned)
    at = _lap(steps, "unpin", at)
    moved = sum(storage.nbytes() for storage in storages)  # (before the storages are emptied)
    for storage in storages:
        storage.resize_(0)
    torch.cuda.empty_cache()
    _lap(steps, "free", at)
    _parked.extend(zip(storages, into, strict=True))
    _buffer.append(host)
    return moved


def _reload(steps: dict[str, float]) -> int:
    at = time.perf_counter()
    host = _buffer[0]
    pairs = []
    for storage, kept in _parked:
        storage.resize_(kept.nbytes())
        pairs.append((storage, kept, kept.data_ptr() - host.ctypes.data))  # (each lies in the buffer)
    _lap(steps, "allocate", at)
    pinned = _copies(host, pairs, steps)
    moved = sum(kept.nbytes() for _, kept in _parked)
    _parked.clear()
    _buffer.clear()
    unpinning = threading.Thread(target=_unpin_then_let_go, args=(pinned, host), name="gpu-magics-unpin", daemon=True)
    _unpinning.append(unpinning)
    unpinning.start()  # the next cell need not wait for it
    return moved


def _unpin_then_let_go(pinned: list[int], host: Any) -> None:
    try:
        _unpin(pinned)
    finally:
        del host


def _wait_for_unpin() -> None:
    while _unpinning:
        _unpinning.pop().join()
