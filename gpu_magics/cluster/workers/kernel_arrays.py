"""This kernel's CuPy arrays, allocated so that a park can take their GPU memory at the bus's pace.

A process cannot free an array that a variable still holds, so before, a park left the kernel's arrays to the driver's
checkpoint (about 2 GB/s). Here CuPy's default memory pool takes its large blocks from CUDA's virtual memory calls: each
block is an address range reserved once, with physical memory mapped into it. A park copies every block to host memory
(``host_copies``: about 55 GB/s on an H200) and lets its physical memory go, keeping the
addresses; the driver then checkpoints only the CUDA context. The resume maps new physical memory at the same addresses
and copies the data back, so every array, view, ``Out`` entry and traceback frame sees its data where it was. Blocks
under ``MIN_BYTES`` (and arrays allocated before the extension was loaded) stay ordinary CUDA memory: the driver moves
them with the context.

Asked for with ``$GPU_MAGICS_PARKABLE_ARRAYS=1``: installed when CuPy is imported in a kernel with the extension
loaded (at once where it is already imported and its pool holds nothing), never where the GPUs are simulated. It is
not the default: on an H200 the seed's first ``%%gpurun gpu`` cell took 2.97 s with it against 2.62 s without (its
first blocks' physical memory is made through the virtual memory calls), its warm cells 0.505 s against 0.493 s in
one run and 0.490 s against 0.493 s in another. Nothing here touches CUDA before CuPy allocates.
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib.abc
import importlib.machinery
import os
import sys
import threading
import time
import types
from typing import Any

import numpy as np

from gpu_magics.cluster.workers import host_copies

ASK_ENV = "GPU_MAGICS_PARKABLE_ARRAYS"
MIN_BYTES = 8 << 20  # smaller blocks stay ordinary CUDA memory (a mapped block rounds up to 2 MiB)
_DEVICE, _READ_WRITE, _PINNED_TYPE = 1, 3, 1  # CU_MEM_LOCATION_TYPE_DEVICE, CU_MEM_ACCESS_FLAGS_PROT_READWRITE, ...
_OUT_OF_MEMORY = 2  # CUDA_ERROR_OUT_OF_MEMORY (and cudaErrorMemoryAllocation)


class _Location(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("id", ctypes.c_int)]


class _AllocFlags(ctypes.Structure):
    _fields_ = [
        ("compressionType", ctypes.c_ubyte),
        ("gpuDirectRDMACapable", ctypes.c_ubyte),
        ("usage", ctypes.c_ushort),
        ("reserved", ctypes.c_ubyte * 4),
    ]


class _Properties(ctypes.Structure):  # CUmemAllocationProp
    _fields_ = [
        ("type", ctypes.c_int),
        ("requestedHandleTypes", ctypes.c_int),
        ("location", _Location),
        ("win32HandleMetaData", ctypes.c_void_p),
        ("allocFlags", _AllocFlags),
    ]


class _Access(ctypes.Structure):  # CUmemAccessDesc
    _fields_ = [("location", _Location), ("flags", ctypes.c_int)]


class DriverError(RuntimeError):
    """A virtual memory call of the driver failed (``status``: its CUresult)."""

    def __init__(self, call: str, status: int) -> None:
        super().__init__(f"{call} failed (CUDA error {status})")
        self.status = status


class _Block:
    __slots__ = ("address", "device", "handle", "size")

    def __init__(self, address: int, size: int, device: int) -> None:
        self.address, self.size, self.device = address, size, device
        self.handle: int | None = None  # the physical memory mapped now (None: let go by a park)


class ParkableMemory:
    """CuPy's allocator for large blocks: reserved address ranges with physical memory that a park lets go."""

    def __init__(self) -> None:
        self._cuda = ctypes.CDLL("libcuda.so.1")
        self._lock = threading.Lock()
        self._blocks: dict[int, _Block] = {}
        self._granularity: dict[int, int] = {}

    def _call(self, name: str, *args: Any) -> None:
        status = getattr(self._cuda, name)(*args)
        if status != 0:
            raise DriverError(name, int(status))

    def _properties(self, device: int) -> _Properties:
        return _Properties(type=_PINNED_TYPE, requestedHandleTypes=0, location=_Location(_DEVICE, device))

    def _rounded(self, size: int, device: int) -> int:
        granularity = self._granularity.get(device)
        if granularity is None:
            found = ctypes.c_size_t(0)
            self._call("cuMemGetAllocationGranularity", ctypes.byref(found), ctypes.byref(self._properties(device)), 0)
            granularity = self._granularity[device] = int(found.value)
        return -(-size // granularity) * granularity

    def _map(self, block: _Block) -> None:
        handle = ctypes.c_ulonglong(0)
        address, size = ctypes.c_ulonglong(block.address), ctypes.c_size_t(block.size)
        self._call("cuMemCreate", ctypes.byref(handle), size, ctypes.byref(self._properties(block.device)), 0)
        try:
            self._call("cuMemMap", address, size, ctypes.c_size_t(0), handle, ctypes.c_ulonglong(0))
        except DriverError:
            self._cuda.cuMemRelease(handle)
            raise
        access = _Access(location=_Location(_DEVICE, block.device), flags=_READ_WRITE)
        try:
            self._call("cuMemSetAccess", address, size, ctypes.byref(access), ctypes.c_size_t(1))
        except DriverError:
            self._cuda.cuMemUnmap(address, size)
            self._cuda.cuMemRelease(handle)
            raise
        block.handle = int(handle.value)

    def _unmap(self, block: _Block) -> None:
        if block.handle is None:
            return
        self._call("cuMemUnmap", ctypes.c_ulonglong(block.address), ctypes.c_size_t(block.size))
        self._call("cuMemRelease", ctypes.c_ulonglong(block.handle))
        block.handle = None

    def malloc(self, size: int) -> Any:
        """A ``cupy.cuda.MemoryPointer`` to ``size`` bytes on the current device (CuPy's allocator call)."""
        import cupy

        if size < MIN_BYTES:
            return cupy.cuda.memory.MemoryPointer(cupy.cuda.memory.Memory(size), 0)
        device = cupy.cuda.runtime.getDevice()
        try:
            rounded = self._rounded(size, device)
            address = ctypes.c_ulonglong(0)
            self._call(
                "cuMemAddressReserve", ctypes.byref(address), ctypes.c_size_t(rounded), ctypes.c_size_t(0),
                ctypes.c_ulonglong(0), ctypes.c_ulonglong(0),
            )  # fmt: skip
            block = _Block(int(address.value), rounded, device)
            try:
                self._map(block)
            except DriverError:
                self._cuda.cuMemAddressFree(address, ctypes.c_size_t(rounded))
                raise
        except DriverError as error:  # CuPy's pool frees its cached blocks and tries again on this error
            status = cupy.cuda.runtime.errorMemoryAllocation if error.status == _OUT_OF_MEMORY else error.status
            raise cupy.cuda.runtime.CUDARuntimeError(status) from None
        with self._lock:
            self._blocks[block.address] = block
        memory = cupy.cuda.memory.UnownedMemory(block.address, size, _Owner(self, block.address), device)
        return cupy.cuda.memory.MemoryPointer(memory, 0)

    def free(self, address: int) -> None:
        """The block's memory and addresses back to the driver (its last array gone, its pool's cache emptied)."""
        with self._lock:
            block = self._blocks.pop(address, None)
        if block is None:
            return
        import cupy

        with cupy.cuda.Device(block.device) as device:
            device.synchronize()  # work still reading it ends first
            try:
                self._unmap(block)
            finally:
                self._cuda.cuMemAddressFree(ctypes.c_ulonglong(block.address), ctypes.c_size_t(block.size))

    def mapped(self) -> list[_Block]:
        with self._lock:
            return [block for block in self._blocks.values() if block.handle is not None]

    def let_go(self, blocks: list[_Block]) -> None:
        """Each block's physical memory back to the driver, its addresses kept."""
        import cupy

        for block in blocks:
            with cupy.cuda.Device(block.device):
                self._unmap(block)

    def map_again(self, blocks: list[_Block]) -> None:
        """New physical memory at each block's addresses (a ``DriverError`` where the GPU has not enough free: the
        blocks mapped so far stay mapped, and a second call maps the rest)."""
        import cupy

        for block in blocks:
            if block.handle is None:
                with cupy.cuda.Device(block.device):
                    self._map(block)


class _Owner:
    """Held by CuPy's memory object: when it goes, its block is freed."""

    __slots__ = ("address", "memory")

    def __init__(self, memory: ParkableMemory, address: int) -> None:
        self.memory, self.address = memory, address

    def __del__(self) -> None:
        with contextlib.suppress(Exception):  # at exit the driver may be gone: the process's memory goes with it
            self.memory.free(self.address)


_memory: ParkableMemory | None = None
why_not = "the extension is not loaded"  # why the allocator is not installed, in words
_parked: tuple[np.ndarray, list[tuple[_Block, int]]] | None = None  # the host buffer, each block and its offset


def installed() -> bool:
    return _memory is not None


def install() -> bool:
    """Make CuPy's default pool take its large blocks here (asked for, CuPy imported, its pool empty, real GPUs);
    whether it does (where not, ``why_not`` says why)."""
    global _memory, why_not
    cupy = sys.modules.get("cupy")
    if _memory is not None:
        return True
    if cupy is None or os.environ.get(ASK_ENV) != "1":
        why_not = "CuPy is not imported" if cupy is None else f"${ASK_ENV} is not 1"
        return False
    from gpu_magics.monitor.sources import source_from_env

    if source_from_env().kind == "fake":
        why_not = "the GPUs are simulated"
        return False
    pool = cupy.get_default_memory_pool()
    if pool.total_bytes():  # arrays allocated already: the pool stays (the driver parks its memory)
        why_not = "CuPy had allocated arrays before the extension was loaded"
        return False
    try:
        memory = ParkableMemory()
    except OSError as error:  # no driver library: nothing to park
        why_not = f"no CUDA driver ({error})"
        return False
    parkable_pool = cupy.cuda.MemoryPool(memory.malloc)
    cupy._default_memory_pool = parkable_pool  # type: ignore[attr-defined]  # what cupy.get_default_memory_pool() answers (telemetry reads it)
    cupy.cuda.set_allocator(parkable_pool.malloc)
    _memory, why_not = memory, ""
    return True


def held_bytes() -> int:
    """The bytes a park would copy from here."""
    return 0 if _memory is None else sum(block.size for block in _memory.mapped())


def offload() -> dict[str, Any]:
    """Copy every mapped block to host memory and let its physical memory go: ``{"bytes", "seconds", "steps"}``.
    A failed copy leaves every block mapped (the driver then moves them)."""
    global _parked
    began, clock = time.perf_counter(), host_copies.Clock()
    if _memory is None or _parked is not None:
        return {"bytes": 0, "seconds": 0.0, "steps": {}}
    import cupy

    host_copies.UNPINS.wait()
    cupy.get_default_memory_pool().free_all_blocks()  # cached blocks are let go, not copied
    blocks = _memory.mapped()
    if not blocks:
        return {"bytes": 0, "seconds": time.perf_counter() - began, "steps": {}}
    for device in {block.device for block in blocks}:
        with cupy.cuda.Device(device):
            cupy.cuda.Device(device).synchronize()  # the cells' work on them ends first
    placed, size = [], 0
    for block in blocks:
        placed.append((block, size))
        size += -(-block.size // host_copies.ALIGN) * host_copies.ALIGN
    host = host_copies.host_buffer(size)
    clock.lap("choose")
    host_copies.copy_through_pinned(host, [(at, block.address, block.size) for block, at in placed], True, clock)
    _memory.let_go(blocks)
    clock.lap("free")
    _parked = (host, placed)
    return {"bytes": sum(block.size for block in blocks), "seconds": time.perf_counter() - began, "steps": clock.steps}


def reload() -> dict[str, Any]:
    """Map every parked block again and copy its data back: ``{"bytes", "seconds", "steps", "began"}``. A
    ``DriverError`` (no room on the GPU) keeps the data in host memory: the next call tries again."""
    global _parked
    began, clock = time.perf_counter(), host_copies.Clock()
    if _memory is None or _parked is None:
        return {"bytes": 0, "seconds": 0.0, "steps": {}, "began": began}
    host, placed = _parked
    _memory.map_again([block for block, _ in placed])
    clock.lap("map")
    pieces = [(at, block.address, block.size) for block, at in placed]
    host_copies.UNPINS.later(host_copies.copy_through_pinned(host, pieces, False, clock, unpin_later=True), host)
    _parked = None
    moved = sum(block.size for block, _ in placed)
    return {"bytes": moved, "seconds": time.perf_counter() - began, "steps": clock.steps, "began": began}


class _InstallOnImport(importlib.abc.MetaPathFinder):
    """Installs the allocator once CuPy's own import has ended (its first arrays come after)."""

    def __init__(self) -> None:
        self.used = False

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if name != "cupy" or self.used:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)  # (asked also by who only looks for CuPy)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return None  # found some other way: the other finders answer, and nothing is installed
        loader: Any = spec.loader
        exec_module = loader.exec_module

        def exec_then_install(module: types.ModuleType) -> None:
            exec_module(module)
            self.used = True  # the import happened: from now on CuPy is found as ever
            install()

        loader.exec_module = exec_then_install
        return spec


def install_on_import(shell: object = None) -> None:
    """At ``%load_ext``: install now where CuPy is imported, else at its import."""
    del shell
    if "cupy" in sys.modules:
        install()
    elif os.environ.get(ASK_ENV) == "1" and not any(isinstance(f, _InstallOnImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _InstallOnImport())


def stop_watching(shell: object = None) -> None:
    """At ``%unload_ext``: CuPy's import installs nothing any more (an allocator installed stays: its arrays live)."""
    del shell
    sys.meta_path[:] = [finder for finder in sys.meta_path if not isinstance(finder, _InstallOnImport)]
