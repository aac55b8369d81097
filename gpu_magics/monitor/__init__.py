"""GPU monitoring: readings from NVML (or a fake), sampled in the background into snapshots.

Importing this package does no NVML work and does not import pynvml; NVML starts on the first read.
"""

from __future__ import annotations

from gpu_magics.monitor.models import GpuProcess, GpuReading, GpuSource, HostReading, Snapshot
from gpu_magics.monitor.nvml import NvmlSource
from gpu_magics.monitor.sampler import (
    MIN_INTERVAL,
    GpuSummary,
    Sampler,
    get_sampler,
    shutdown_sampler,
    summarize,
)
from gpu_magics.monitor.sources import make_source

__all__ = [
    "MIN_INTERVAL",
    "GpuProcess",
    "GpuReading",
    "GpuSource",
    "GpuSummary",
    "HostReading",
    "NvmlSource",
    "Sampler",
    "Snapshot",
    "get_sampler",
    "make_source",
    "shutdown_sampler",
    "summarize",
]
