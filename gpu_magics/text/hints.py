"""The commands that hints suggest, as they work on this machine: one place, so every hint says the same.

Plain ``%gpucluster`` needs real GPUs, CuPy and dask-cuda; where any is missing (no GPU, simulated GPUs), the
command that works is ``%gpucluster --cpu-workers N`` with the same N everywhere (``cpu_workers()``: at most the
cores). Nothing here imports CuPy or dask-cuda (``find_spec`` only) nor reads a GPU until a hint is asked for.
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


def gpu_cluster_ready() -> bool:
    """Whether plain ``%gpucluster`` starts here: real GPUs are visible and CuPy and dask-cuda are installed."""
    from gpu_magics import gpus

    inventory = gpus.inventory()
    if inventory.simulated or not inventory.devices():
        return False
    return gpu_packages_installed()


def gpu_packages_installed() -> bool:
    """Whether CuPy and dask-cuda are installed (found, not imported)."""
    return all(_installed(name) for name in ("cupy", "dask_cuda"))


def start_cluster_command() -> str:
    """The command that starts a cluster on this machine: ``%gpucluster`` or ``%gpucluster --cpu-workers N``."""
    return PROG if gpu_cluster_ready() else cpu_cluster_command()


def _installed(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False
