"""The commands that hints suggest, as they work on this machine: one place, so every hint says the same.

Plain ``%gpucluster`` needs real GPUs, CuPy and dask-cuda; where any is missing (no GPU, simulated GPUs), the
command that works is ``%gpucluster --cpu-workers N`` with the same N everywhere (``cpu_workers()``: at most the
cores); which of the two a hint names, the inventory says (``gpus.start_cluster_command``). Nothing here imports
CuPy or dask-cuda (``find_spec`` only) nor reads a GPU.
"""

from __future__ import annotations

import importlib.util
import os

PROG = "%gpucluster"
DEFAULT_CPU_WORKERS = 2  # what the notebooks and the panel suggest, never more than the cores


def cpu_workers() -> int:
    """The N of ``%gpucluster --cpu-workers N`` in every hint: 2, or the number of cores when fewer."""
    return max(1, min(DEFAULT_CPU_WORKERS, os.cpu_count() or 1))


def cpu_cluster_command() -> str:
    """``%gpucluster --cpu-workers 2``: a CPU cluster, which starts on any machine."""
    return f"{PROG} --cpu-workers {cpu_workers()}"


def gpu_packages_installed() -> bool:
    """Whether CuPy and dask-cuda are installed (found, not imported)."""
    return all(_installed(name) for name in ("cupy", "dask_cuda"))


def _installed(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False
