"""Whether this process already has a CUDA context on a device, asked without creating one.

The workers' telemetry and the kernel's own report read a pool (``pools``) only once the driver says this process
has a context there (``cuDevicePrimaryCtxGetState``); ``workers.kernel_context`` asks before a cluster starts.
"""

from __future__ import annotations

import ctypes
import sys
from collections.abc import Sequence
from typing import Any

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


CUDA_ERROR_NOT_INITIALIZED = 3  # what the driver answers before ``cuInit``


def primary_contexts(ordinals: Sequence[int], driver: Any = None) -> set[int] | None:
    """Which of these devices (this process's CUDA ordinals) have an active primary context; ``None`` when the
    driver cannot be asked. Asking creates no context, and starts no driver: a process whose driver was never
    started (``cuInit``) has no context, and starting it costs about 0.3 s per visible GPU (1.2 s with four).
    ``driver``: the CUDA driver library (default: ``libcuda.so.1``)."""
    if driver is None:
        try:
            driver = ctypes.CDLL("libcuda.so.1")
        except OSError:
            return None
    count = ctypes.c_int()
    started = driver.cuDeviceGetCount(ctypes.byref(count))
    if started == CUDA_ERROR_NOT_INITIALIZED:
        return set()
    if started != 0:
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
