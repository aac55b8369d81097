"""What this process itself holds on its GPUs: its RMM or CuPy pool, or NVML's figure for its pid.

Used by the workers' telemetry and by the kernel's own report. Never creates a CUDA context: the pools are read
only once the driver says this process already has one (``cuDevicePrimaryCtxGetState``).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import sys
from collections.abc import Sequence

from gpu_magics.monitor.models import GpuReading


def held_on(reading: GpuReading) -> tuple[int | None, str | None]:
    """Bytes this process holds on ``reading``'s GPU, and where the figure comes from: the RMM or CuPy pool
    on the device this worker computes on (visible index 0, once it has a CUDA context), else NVML's
    per-process figure for this pid (absent in containers that hide host pids)."""
    if reading.index == 0 and has_cuda_context():
        pooled = pool_bytes()
        if pooled is not None:
            return pooled
    for process in reading.processes or ():
        if process.pid == os.getpid():
            return process.used_memory, "nvml"
    return None, None


def pool_bytes() -> tuple[int, str] | None:
    rmm = sys.modules.get("rmm")
    if rmm is not None:
        with contextlib.suppress(Exception):
            resource = rmm.mr.get_current_device_resource()
            if hasattr(resource, "pool_size"):
                return int(resource.pool_size()), "rmm"
    cupy = sys.modules.get("cupy")
    if cupy is not None:
        with contextlib.suppress(Exception):
            return int(cupy.get_default_memory_pool().total_bytes()), "cupy"
    return None


CUDA_MODULES = ("cupy", "torch", "numba.cuda", "jax", "rmm", "cuda")


_active: set[int] = set()  # devices found with a context: it lasts as long as the process
_loaded = False  # whether the CUDA driver library is mapped into this process


def has_cuda_context(device: int = 0) -> bool:
    """Whether this process's primary CUDA context on ``device`` (its CUDA ordinal) exists; a CPU worker on a
    GPU host never gets a context from asking. Cheap when asked every second: nothing is called before a CUDA
    library is imported, and a context once found is remembered."""
    global _loaded
    if device in _active:
        return True
    if not _loaded:  # once mapped, the driver stays: read /proc/self/maps only until then
        _loaded = any(name in sys.modules for name in CUDA_MODULES) and cuda_loaded()
        if not _loaded:
            return False
    if device in (primary_contexts([device]) or set()):
        _active.add(device)
        return True
    return False


def cuda_loaded() -> bool:
    """Whether the CUDA driver library is mapped into this process (without it, no context can exist)."""
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as maps:
            return any("libcuda.so" in line for line in maps)
    except OSError:
        return any(name in sys.modules for name in CUDA_MODULES)


def primary_contexts(ordinals: Sequence[int]) -> set[int] | None:
    """Which of these devices (this process's CUDA ordinals) have an active primary context; ``None`` when the
    driver cannot be asked. Asking creates no context."""
    try:
        driver = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return None
    if driver.cuInit(0) != 0:
        return None
    found = set()
    for ordinal in ordinals:
        device, flags, active = ctypes.c_int(), ctypes.c_uint(), ctypes.c_int()
        if driver.cuDeviceGet(ctypes.byref(device), ordinal) != 0:
            return None
        if driver.cuDevicePrimaryCtxGetState(device, ctypes.byref(flags), ctypes.byref(active)) != 0:
            return None
        if active.value:
            found.add(ordinal)
    return found
