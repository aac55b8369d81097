"""What this process itself holds on its GPUs: its RMM or CuPy pool, or NVML's figure for its pid.

Used by the workers' telemetry and by the kernel's own report. Never creates a CUDA context: the pools are read
only once the driver says this process already has one (``cuDevicePrimaryCtxGetState``).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import sys
from typing import Any

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


_driver: Any = None


def has_cuda_context(device: int = 0) -> bool:
    """Whether this process's primary CUDA context on ``device`` exists; asks the driver without making one
    (``cuDevicePrimaryCtxGetState``), so a CPU worker on a GPU host never gets a context from telemetry."""
    global _driver
    if "cupy" not in sys.modules and "rmm" not in sys.modules:
        return False
    try:
        if _driver is None:
            _driver = ctypes.CDLL("libcuda.so.1")
            if _driver.cuInit(0) != 0:
                _driver = False
        if not _driver:
            return False
        flags, active = ctypes.c_uint(), ctypes.c_int()
        return bool(_driver.cuDevicePrimaryCtxGetState(device, ctypes.byref(flags), ctypes.byref(active)) == 0) and (
            active.value == 1
        )
    except OSError:
        _driver = False
        return False
