"""On each GPU worker, at a park: its device arrays copied to host memory by parallel copies and freed, so that the
driver's checkpoint that follows moves only what is left (the CUDA context, memory a library holds out of sight); at
the resume, once the driver restored the process, copied back. Run through ``client.run`` (``plan``, ``offload``,
``reload``), off the worker's event loop.

The copies go through ``host_copies`` (about 55 GB/s on an H200, against the driver's 2 GB/s). Only CuPy arrays held
whole in the worker's data (its device buffer where dask-cuda spills) move this way; each stays in the data as a
``Parked`` placeholder, which the resume replaces with the array again. Where the kernel's GPUs are simulated (it
says so: a worker forked before ``$GPU_MAGICS_SOURCE`` was set cannot tell) a stand-in treats NumPy arrays as device
arrays, so the choices, the lines and the data's way out and back are tested without a GPU; the kernel's
``$GPU_MAGICS_SIMULATED_HOST_BYTES`` sets the host memory the stand-in says is available.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import socket
import time
from collections.abc import MutableMapping
from typing import Any, Literal, Protocol

import numpy as np

from gpu_magics.cluster.workers import host_copies

PARKED_ATTRIBUTE = "_gpu_magics_offloaded"  # on the worker: what its last offload holds
HOST_BYTES_ENV = "GPU_MAGICS_SIMULATED_HOST_BYTES"
Layout = Literal["C", "F"]
ALIGN = host_copies.ALIGN
Clock = host_copies.Clock


@dataclasses.dataclass(frozen=True)
class Parked:
    """What stands in a worker's data for an array while it is in host memory (a task never sees one: work resumes
    the cluster before it runs)."""

    key: str
    nbytes: int


@dataclasses.dataclass(frozen=True)
class Entry:
    key: Any
    offset: int
    nbytes: int
    shape: tuple[int, ...]
    dtype: str
    order: Layout


@dataclasses.dataclass
class Offloaded:
    """A worker's arrays in one host buffer."""

    host: np.ndarray
    entries: list[Entry]


class Device(Protocol):
    """What the offload asks of the GPU: which values move, the copies both ways, and giving the freed memory back."""

    min_bytes: int

    def movable(self, value: object) -> Layout | None:
        """``"C"`` or ``"F"`` for an array that moves whole (its layout), else ``None``."""

    def to_host(self, arrays: list[tuple[Any, int]], host: np.ndarray, clock: Clock) -> None:
        """Copy each ``(array, offset)`` into ``host`` at its offset; return once all are there."""

    def to_device(self, entries: list[Entry], host: np.ndarray, clock: Clock) -> list[Any]:
        """New arrays from ``host``, one per entry; return once all are there (what is left to tidy, such as
        unpinning the buffer, may go on after)."""

    def release(self) -> None:
        """Give the memory the freed arrays held back to the driver (their pools' cached blocks)."""

    def host_available(self) -> int:
        """Bytes of host memory available for the copies."""


class CupyDevice:
    """CuPy arrays on the worker's GPU: pinned host memory, copies on ``STREAMS`` streams."""

    min_bytes = 1 << 20  # smaller arrays stay: the driver moves them with the context

    def movable(self, value: object) -> Layout | None:
        import cupy

        array: Any = value
        if type(array) is not cupy.ndarray or array.nbytes < self.min_bytes:
            return None
        return "C" if array.flags.c_contiguous else "F" if array.flags.f_contiguous else None

    def to_host(self, arrays: list[tuple[Any, int]], host: np.ndarray, clock: Clock) -> None:
        host_copies.copy_through_pinned(
            host, [(offset, array.data.ptr, array.nbytes) for array, offset in arrays], True, clock
        )

    def to_device(self, entries: list[Entry], host: np.ndarray, clock: Clock) -> list[Any]:
        import cupy

        arrays = [cupy.empty(entry.shape, entry.dtype, order=entry.order) for entry in entries]
        clock.lap("allocate")
        pieces = [(e.offset, a.data.ptr, e.nbytes) for a, e in zip(arrays, entries, strict=True)]
        host_copies.UNPINS.later(host_copies.copy_through_pinned(host, pieces, False, clock, unpin_later=True), host)
        return arrays

    def release(self) -> None:
        import cupy

        cupy.get_default_memory_pool().free_all_blocks()

    def host_available(self) -> int:
        import psutil

        return int(psutil.virtual_memory().available)


class SimulatedDevice:
    """Simulated GPUs: NumPy arrays play the device's, copied into the host buffer and back (``host_bytes``: the
    host memory it says is available; ``None``: what the host has)."""

    min_bytes = 1

    def __init__(self, host_bytes: int | None = None) -> None:
        self.host_bytes = host_bytes

    def movable(self, value: object) -> Layout | None:
        if type(value) is not np.ndarray or value.dtype.hasobject or value.nbytes < self.min_bytes:
            return None
        return "C" if value.flags.c_contiguous else "F" if value.flags.f_contiguous else None

    def to_host(self, arrays: list[tuple[Any, int]], host: np.ndarray, clock: Clock) -> None:
        host_copies.touch(host)
        clock.lap("touch")
        for array, offset in arrays:
            host[offset : offset + array.nbytes] = np.frombuffer(array.tobytes(order="A"), np.uint8)
        clock.lap("copy")

    def to_device(self, entries: list[Entry], host: np.ndarray, clock: Clock) -> list[Any]:
        return [
            np.frombuffer(host[e.offset : e.offset + e.nbytes].tobytes(), e.dtype).reshape(e.shape, order=e.order)
            for e in entries
        ]

    def release(self) -> None:
        pass

    def host_available(self) -> int:
        if self.host_bytes is not None:
            return self.host_bytes
        import psutil

        return int(psutil.virtual_memory().available)


def device(simulated: bool) -> Device:
    """The GPU this worker offloads from: the stand-in where the kernel's GPUs are simulated."""
    if not simulated:
        return CupyDevice()
    given = os.environ.get(HOST_BYTES_ENV)
    return SimulatedDevice(int(given) if given else None)


def simulated_here() -> bool:
    """In the kernel: whether its GPUs are simulated (what it passes to the workers' calls)."""
    from gpu_magics.cluster.workers import checkpoint

    return isinstance(checkpoint.driver(), checkpoint.StandInCheckpoint)


def _device_values(data: MutableMapping[Any, Any]) -> MutableMapping[Any, Any] | None:
    """Where the worker keeps the values on its GPU: dask-cuda's device buffer (its spilled values stay where they
    are), or the data itself; ``None`` for a store whose values move by themselves (dask-cuda's JIT unspill)."""
    if type(data).__name__ == "ProxifyHostFile":
        return None
    device_buffer = getattr(data, "device_buffer", None)
    fast = getattr(device_buffer if device_buffer is not None else data, "fast", None)  # distributed's SpillBuffer:
    if fast is not None:  # what it holds in memory (what it spilled to disk stays there)
        return getattr(fast, "d", fast)  # zict's LRU: its dict, read without touching its order
    return data


def _chosen(data: MutableMapping[Any, Any], gpu: Device) -> list[tuple[Any, Any, Layout]]:
    values = _device_values(data)
    if values is None:
        return []
    chosen = []
    for key, value in list(values.items()):
        order = gpu.movable(value)
        if order is not None:
            chosen.append((key, value, order))
    return chosen


async def plan(gpu: Device, dask_worker: Any) -> dict[str, Any]:
    """What an offload would copy here (``bytes``; ``taken``: the host memory it takes), and the host memory
    available: ``{"bytes", "taken", "host", "available"}``."""
    chosen = _chosen(dask_worker.data, gpu)
    size = sum(value.nbytes for _, value, _ in chosen)
    taken = sum(-(-value.nbytes // ALIGN) * ALIGN for _, value, _ in chosen)  # each in its own pages
    return {"bytes": size, "taken": taken, "host": socket.gethostname(), "available": gpu.host_available()}


async def offload(gpu: Device, dask_worker: Any) -> dict[str, Any]:
    """Copy this worker's device arrays to host memory and free them: ``{"bytes", "seconds"}``."""
    return await asyncio.get_running_loop().run_in_executor(None, _offload, gpu, dask_worker)


def _offload(gpu: Device, worker: Any) -> dict[str, Any]:
    host_copies.UNPINS.wait()  # the last resume's buffer unpinned first
    began, clock = time.perf_counter(), Clock()
    if getattr(worker, PARKED_ATTRIBUTE, None) is not None:  # an earlier park's arrays never came back: first back
        _reload(gpu, worker)
    data = worker.data
    chosen = _chosen(data, gpu)
    entries, offset = [], 0
    for key, array, order in chosen:
        entries.append(Entry(key, offset, array.nbytes, tuple(array.shape), array.dtype.str, order))
        offset += -(-array.nbytes // ALIGN) * ALIGN
    array = None  # (the loop's name held the last one past the release: its pool kept it for the driver to move)
    if not entries:
        return {"bytes": 0, "seconds": time.perf_counter() - began, "steps": {}}
    host = host_copies.host_buffer(offset)
    clock.lap("choose")
    gpu.to_host([(moved, entry.offset) for (_, moved, _), entry in zip(chosen, entries, strict=True)], host, clock)
    chosen.clear()  # no reference left here: the arrays go once the data lets them go
    for entry in entries:
        data[entry.key] = Parked(str(entry.key), entry.nbytes)
    gpu.release()
    clock.lap("free")
    setattr(worker, PARKED_ATTRIBUTE, Offloaded(host, entries))
    seconds = time.perf_counter() - began
    return {"bytes": sum(entry.nbytes for entry in entries), "seconds": seconds, "steps": clock.steps}


async def reload(gpu: Device, dask_worker: Any) -> dict[str, Any]:
    """Copy back what the last offload holds (keys released meanwhile stay out): ``{"bytes", "seconds"}``."""
    return await asyncio.get_running_loop().run_in_executor(None, _reload, gpu, dask_worker)


def _reload(gpu: Device, worker: Any) -> dict[str, Any]:
    began, clock = time.perf_counter(), Clock()
    held: Offloaded | None = getattr(worker, PARKED_ATTRIBUTE, None)
    if held is None:
        return {"bytes": 0, "seconds": 0.0, "steps": {}}
    data = worker.data
    wanted = [entry for entry in held.entries if isinstance(_peek(data, entry.key), Parked)]
    arrays = gpu.to_device(wanted, held.host, clock)
    for entry, array in zip(wanted, arrays, strict=True):
        data[entry.key] = array
    delattr(worker, PARKED_ATTRIBUTE)  # the host buffer goes with it
    clock.lap("free host memory")
    seconds = time.perf_counter() - began
    return {"bytes": sum(entry.nbytes for entry in wanted), "seconds": seconds, "steps": clock.steps}


def _peek(data: MutableMapping[Any, Any], key: Any) -> object:
    try:
        return data[key]
    except KeyError:
        return None


GPU_MONITOR_ATTRIBUTE = "_gpu_magics_gpu_monitor"  # on the worker: the GPU its system monitor read before a park


def gpu_monitor(on: bool, dask_worker: Any) -> None:
    """Turn the GPU reads of distributed's system monitor off (at a park) or back on (at the resume). It reads NVML
    on the worker's event loop every half second, and in a parked process an NVML read waits until the process is
    resumed: the worker would stop answering, its heartbeats too."""
    _gpu_monitor(on, getattr(dask_worker, "monitor", None), dask_worker)


def _gpu_monitor(on: bool, monitor: Any, holder: Any) -> None:
    if monitor is None:
        return
    if not on:
        if getattr(monitor, "gpu_name", None):
            setattr(holder, GPU_MONITOR_ATTRIBUTE, monitor.gpu_name)
            monitor.gpu_name = None
    elif getattr(holder, GPU_MONITOR_ATTRIBUTE, None):
        monitor.gpu_name = getattr(holder, GPU_MONITOR_ATTRIBUTE)
        delattr(holder, GPU_MONITOR_ATTRIBUTE)


def scheduler_gpu_monitor(on: bool, scheduler: Any) -> None:
    """The same for a scheduler that runs in a parked kernel (on its event loop, as the monitor's own reads)."""
    _gpu_monitor(on, getattr(scheduler, "monitor", None), scheduler)
