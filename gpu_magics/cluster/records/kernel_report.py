"""In the kernel: what this kernel holds on its GPUs (arrays, its pool's cache, its CUDA context), told to the side
panel through its own record (``record.KernelRecord``), and given back on ``%gpucluster free``.

The record is written after each cell that changed the figures (an IPython ``post_run_cell`` hook that ``%load_ext``
installs; the reading, NVML's process list for every GPU among it, about a millisecond on 4 GPUs, is done by a
thread of its own, so the cell's prompt does not wait for it) and removed when the kernel holds nothing, unloads
the extension or exits. Reading never starts CUDA:
pools are read only where this process already has a context (``telemetry.pools``), and NVML's figure for this
process needs no context at all.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpu_magics import gpus
from gpu_magics.arrays.caps import notebook
from gpu_magics.cluster.records import record
from gpu_magics.cluster.telemetry import pools
from gpu_magics.cluster.telemetry.pools import Freed, ProcessMemory
from gpu_magics.monitor.models import GpuProcess
from gpu_magics.text.units import dropped

REUSE_S = 0.5  # figures read less than this long ago are reused (a cell end and a record refresh together)


@dataclass(frozen=True)
class KernelGpu:
    """One device on which this kernel holds memory."""

    index: int  # as this kernel numbers it (its CUDA device)
    uuid: str
    name: str
    memory_total: int | None
    held: ProcessMemory

    def to_json(self) -> dict[str, Any]:
        """As the kernel's record and the cluster record's kernel member hold it (types.ts IKernelGpu)."""
        return {
            "index": self.index,
            "uuid": self.uuid,
            "name": self.name,
            "label": f"GPU {self.index}",
            "memory_total": self.memory_total,
            "process_memory": self.held.total,
            "process_memory_source": self.held.source,
            "array_memory": self.held.arrays,
            "cached_memory": self.held.cached,
            "context_memory": self.held.context,
        }


names_by_gpu: Callable[[list[int]], dict[int, list[dict[str, Any]]]] | None = None
"""The names that hold this kernel's memory on each GPU (by device index), for the record (``%gpumemory`` sets it)."""

_lock = threading.Lock()
_refreshing = threading.Lock()  # the record's writer: one refresh at a time
_last: tuple[float, list[KernelGpu]] | None = None
_written: tuple[Path, list[dict[str, Any]], str | None] | None = None  # the record, its GPUs, its cap
_started_at: float | None = None
_atexit = False


def kernel_memory(*, fresh: bool = False) -> list[KernelGpu]:
    """Each visible device on which this kernel holds memory, with the three figures where known."""
    global _last
    with _lock:
        if not fresh and _last is not None and time.monotonic() - _last[0] < REUSE_S:
            return _last[1]
        found = _read()
        _last = (time.monotonic(), found)
        return found


def _read() -> list[KernelGpu]:
    from gpu_magics.cluster.workers import kernel_park
    from gpu_magics.monitor import reads_paused

    if kernel_park.parked() is not None or reads_paused.paused():  # it holds nothing there (or is being parked)
        return []
    devices = gpus.inventory().devices()
    held = {device.index: pools.pool_on(device.index, device.uuid, "kernel") for device in devices}
    if not any(held.values()) and not _has_context(len(devices)):
        return []
    processes = nvml_processes()
    found = []
    for device in devices:
        pool = held[device.index]
        nvml = next((p.used_memory for p in processes.get(device.uuid) or () if p.pid == os.getpid()), None)
        if pool is None and nvml is None:
            continue
        if pool is None:
            memory = ProcessMemory(total=nvml, source="nvml")
        else:
            context = nvml - pool.pool if nvml is not None and nvml >= pool.pool else None
            total = nvml if nvml is not None else pool.pool
            memory = ProcessMemory(total, pool.arrays, pool.cached, context, pool.source)
        found.append(KernelGpu(device.index, device.uuid, device.name, device.memory_total, memory))
    return found


def _has_context(count: int) -> bool:
    from gpu_magics.cluster.telemetry.process_memory import has_cuda_context

    return any(has_cuda_context(ordinal) for ordinal in range(count))


def nvml_processes() -> dict[str, tuple[GpuProcess, ...] | None]:
    from gpu_magics.monitor.models import process_lists
    from gpu_magics.monitor.sampler import get_sampler

    return process_lists(get_sampler().source)  # NVML's never raises: a GPU it cannot read is None


def held_by_uuid() -> dict[str, tuple[int | None, bool]]:
    """GPU UUID -> (bytes this kernel holds there, whether that counts its CUDA context): for ``sharing``."""
    return {
        gpu.uuid: (gpu.held.total, gpu.held.source == "nvml" or gpu.held.context is not None) for gpu in kernel_memory()
    }


def free() -> dict[int, Freed]:
    """Give back what this kernel's pools cache, on every device where it holds one; the record follows."""
    released = {}
    for device in gpus.inventory().devices():
        freed = pools.free_on(device.index, device.uuid, "kernel")
        if freed is not None:
            released[device.index] = freed
    refresh(fresh=True)
    return released


def refresh(*, fresh: bool = False) -> None:
    """Write this kernel's record when its figures changed (remove it when it holds nothing); never raises. One
    refresh at a time: the thread after cells and ``%gpucluster free`` may ask at once."""
    with _refreshing:
        _refresh(fresh)


def _refresh(fresh: bool) -> None:
    global _written, _started_at, _atexit
    try:
        read = kernel_memory(fresh=fresh)
        found = [gpu.to_json() for gpu in read]
        names = _names([gpu.index for gpu in read])
        for gpu, data in zip(read, found, strict=True):
            if names.get(gpu.index):
                data["top_names"] = names[gpu.index]
        cap = notebook.user_cap()
        spec = None if cap is None else cap.spec()
        if _written is not None and (_written[1], _written[2]) == (found, spec):
            return
        if not found and spec is None:  # a kernel that holds nothing and keeps to no cap of its own: nothing to say
            _remove_written()
            return
        _started_at = _started_at or time.time()
        mine = record.KernelRecord(gpus=tuple(found), started_at=_started_at, memory_cap=spec, **record.here())
        _written = (record.write_record(mine, durable=False), found, spec)
        if not _atexit:
            atexit.register(remove)
            _atexit = True
    except Exception as error:  # a record that fails any way: the cell's result stands
        dropped("writing the kernel's record", error, once=True)


def remove() -> None:
    """Remove this kernel's record, if it wrote one (a refresh asked after the last cell is waited for first, so it
    cannot write the record again after this)."""
    settle(2.0)
    with _refreshing:
        _remove_written()


def _names(indices: list[int]) -> dict[int, list[dict[str, Any]]]:
    """``names_by_gpu`` for ``indices``; none where it is not set or fails (the record goes on without them)."""
    reader = names_by_gpu
    if reader is None or not indices:
        return {}
    try:
        return reader(indices)
    except Exception as error:  # an object that cannot be looked at: the figures stand
        dropped("reading which names hold the kernel's GPU memory", error, once=True)
        return {}


def _remove_written() -> None:
    global _written
    written, _written = _written, None
    if written is not None:
        record.remove_record(written[0])


class _AfterCells:
    """The thread that refreshes the record after cells: each cell asks (``ask``), the thread reads and writes
    once per ask or fewer (asks that come while it works are answered by its next refresh)."""

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._asked = 0
        self._done = 0
        self._thread: threading.Thread | None = None
        self.stopped = False

    def ask(self) -> None:
        with self._changed:
            self._asked += 1
            self._changed.notify_all()
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="gpu-magics-kernel-record", daemon=True)
                self._thread.start()

    def _run(self) -> None:
        while True:
            with self._changed:
                self._changed.wait_for(lambda: self._asked > self._done)
                asked = self._asked
            if not self.stopped:
                refresh(fresh=True)
            with self._changed:
                self._done = asked
                self._changed.notify_all()

    def settle(self, timeout: float = 10.0) -> bool:
        """Wait until every refresh asked so far is done; whether it was in time."""
        with self._changed:
            asked = self._asked
            return self._changed.wait_for(lambda: self._done >= asked, timeout)


_after_cells = _AfterCells()


def settle(timeout: float = 10.0) -> bool:
    """Wait until the record says what the kernel held after the last cell (before it is removed, and in tests)."""
    return _after_cells.settle(timeout)


def _after_cell(result: Any = None) -> None:
    _after_cells.ask()


def install(shell: Any) -> None:
    """After each cell, say what the kernel holds (``%load_ext``)."""
    events = getattr(shell, "events", None)
    _after_cells.stopped = False
    if events is not None and _after_cell not in events.callbacks.get("post_run_cell", []):
        events.register("post_run_cell", _after_cell)


def uninstall(shell: Any) -> None:
    """Stop reporting and remove the record (``%unload_ext``)."""
    events = getattr(shell, "events", None)
    if events is not None:
        with contextlib.suppress(ValueError):
            events.unregister("post_run_cell", _after_cell)
    _after_cells.stopped = True
    remove()
