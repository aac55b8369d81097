"""The four backends as plans: what hardware a cell runs on and the dask configuration that makes it so.

``cpu-single``  synchronous scheduler, numpy chunks, one thread.
``cpu-threads`` threaded scheduler on ``--workers`` threads (default: every core), numpy chunks.
``gpu``         threaded scheduler whose threads all use one CUDA device (``--device``), cupy chunks;
                this configuration wins over an active distributed ``Client``.
``multi-gpu``   the ``%gpucluster`` client, cupy chunks (numpy chunks on a cluster of CPU workers).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Executor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import dask
from IPython.core.error import UsageError

from gpu_magics import devices
from gpu_magics.options import BACKENDS

if TYPE_CHECKING:
    from distributed import Client

CPU_COUNT = os.cpu_count() or 1

# Threads feeding one GPU. Every dask task on a GPU only queues kernels, so a few threads keep the device busy;
# more threads add GIL and allocator contention without more throughput. See benchmarks/seed_workload.py.
DEFAULT_GPU_THREADS = 8


@dataclass(frozen=True)
class BackendPlan:
    """A resolved backend: where the cell runs and how dask is configured for it."""

    name: str
    hardware: str
    chunk_type: str  # "numpy" or "cupy": what array.backend creates
    config: dict[str, Any] = field(default_factory=dict)
    gpu_indices: tuple[int, ...] = ()
    client: Client | None = None
    notes: tuple[str, ...] = ()

    @contextlib.contextmanager
    def activate(self) -> Iterator[None]:
        """Apply the dask configuration for the duration of the block."""
        with dask.config.set(self.config):
            yield

    def synchronize(self) -> None:
        """Wait for the GPU work this backend queued; called before the clock stops."""
        if self.client is not None and self.chunk_type == "cupy":
            with contextlib.suppress(Exception):
                self.client.run(_synchronize_worker_device)
        elif self.gpu_indices:
            devices.synchronize(self.gpu_indices)


@dataclass(frozen=True)
class Preferences:
    """User settings that shape backend plans (traits of ``GpuMagics``)."""

    gpu_threads: int = DEFAULT_GPU_THREADS
    cpu_threads: int | None = None


def plan(
    name: str | None,
    *,
    device: int | None = None,
    workers: int | None = None,
    default: str = "auto",
    preferences: Preferences | None = None,
) -> BackendPlan:
    """Resolve ``name`` (``None`` = the default backend) into a plan, or raise a one-line ``UsageError``."""
    preferences = preferences or Preferences()
    chosen = name or default
    notes: list[str] = []
    if chosen == "auto":
        chosen, reason = _auto_choice()
        notes.append(f"auto picked {chosen}: {reason}")
    if device is not None and chosen != "gpu":
        raise UsageError(f"%%gpurun: --device applies to the gpu backend only, not {chosen}.")
    if workers is not None and chosen not in ("cpu-threads", "gpu"):
        raise UsageError(f"%%gpurun: --workers applies to cpu-threads and gpu only, not {chosen}.")
    builder = _BUILDERS.get(chosen)
    if builder is None:
        raise UsageError(f"%%gpurun: unknown backend {chosen!r}; choose one of {', '.join(BACKENDS)}, auto.")
    result = builder(device, workers, preferences)
    if notes:
        result = dataclasses.replace(result, notes=(*notes, *result.notes))
    return result


def _auto_choice() -> tuple[str, str]:
    from gpu_magics import cluster

    if cluster.active_client() is not None and cluster.has_gpu_workers():
        return "multi-gpu", "a cluster with GPU workers is attached"
    found = devices.inventory().devices()
    if found:
        return "gpu", f"{devices.describe(found)} visible, no GPU cluster attached"
    reason = devices.inventory().unavailable_reason() or "no GPU visible"
    return "cpu-threads", f"{reason}"


def _cpu_single(device: int | None, workers: int | None, preferences: Preferences) -> BackendPlan:
    return BackendPlan(
        name="cpu-single",
        hardware="1 CPU thread",
        chunk_type="numpy",
        config={"scheduler": "synchronous", "array.backend": "numpy"},
    )


def _cpu_threads(device: int | None, workers: int | None, preferences: Preferences) -> BackendPlan:
    threads = workers or preferences.cpu_threads or CPU_COUNT
    return BackendPlan(
        name="cpu-threads",
        hardware=f"{threads} CPU thread{'s' if threads != 1 else ''}",
        chunk_type="numpy",
        config={"scheduler": "threads", "num_workers": threads, "pool": None, "array.backend": "numpy"},
    )


def _gpu(device: int | None, workers: int | None, preferences: Preferences) -> BackendPlan:
    inventory = devices.inventory()
    found = inventory.devices()
    if not found:
        reason = inventory.unavailable_reason() or "no CUDA device is visible"
        fix = f"; to use a GPU, {devices.CUPY_INSTALL}" if "CuPy is not installed" in reason else ""
        raise UsageError(f"%%gpurun gpu: {reason}; use cpu-threads or auto on this machine{fix}.")
    index = 0 if device is None else device
    if index >= len(found):
        visible = ", ".join(f"{d.index} ({d.name})" for d in found)
        raise UsageError(f"%%gpurun gpu: there is no GPU {index}; visible GPUs: {visible}.")
    threads = workers or preferences.gpu_threads
    chosen = found[index]
    hardware = f"1x {chosen.name}" + (f" (GPU {index})" if len(found) > 1 else "")
    return BackendPlan(
        name="gpu",
        hardware=hardware,
        chunk_type="cupy",
        config={
            "scheduler": "threads",
            "pool": device_pool(index, threads),
            "num_workers": threads,
            "array.backend": "cupy",
        },
        gpu_indices=(index,),
    )


def _multi_gpu(device: int | None, workers: int | None, preferences: Preferences) -> BackendPlan:
    from gpu_magics import cluster

    client = cluster.require_client()
    on_gpus = cluster.has_gpu_workers()
    notes = () if on_gpus else ("the cluster has CPU workers only: numpy chunks on those workers",)
    return BackendPlan(
        name="multi-gpu",
        hardware=cluster.describe_hardware(),
        chunk_type="cupy" if on_gpus else "numpy",
        config={"scheduler": client, "array.backend": "cupy" if on_gpus else "numpy"},
        client=client,
        notes=notes,
    )


_BUILDERS: dict[str, Callable[[int | None, int | None, Preferences], BackendPlan]] = {
    "cpu-single": _cpu_single,
    "cpu-threads": _cpu_threads,
    "gpu": _gpu,
    "multi-gpu": _multi_gpu,
}

_pools: dict[tuple[int, int], Executor] = {}
_pools_lock = threading.Lock()


def device_pool(index: int, threads: int) -> Executor:
    """A thread pool (kept for the process) whose threads run their CUDA work on device ``index``.

    CuPy's current device is per thread, so the device is set as each pool thread starts.
    """
    from dask.threaded import ContextAwareThreadPoolExecutor

    with _pools_lock:
        pool = _pools.get((index, threads))
        if pool is None:
            pool = ContextAwareThreadPoolExecutor(
                threads,
                thread_name_prefix=f"gpu-magics-gpu{index}",
                initializer=_use_device,
                initargs=(index,),
            )
            _pools[(index, threads)] = pool
        return pool


def shutdown_pools() -> None:
    """Stop the per-device thread pools (on ``%unload_ext``)."""
    with _pools_lock:
        pools = list(_pools.values())
        _pools.clear()
    for pool in pools:
        pool.shutdown(wait=False)


def _use_device(index: int) -> None:
    import cupy

    cupy.cuda.Device(index).use()


def _synchronize_worker_device() -> None:
    import cupy

    cupy.cuda.Device().synchronize()
