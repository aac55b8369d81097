"""The kernel's thread pools for the ``gpu`` backend: one per local GPU (and thread count), kept for the process,
whose threads run their CUDA work on that GPU; stopped on ``%unload_ext``."""

from __future__ import annotations

import threading
from concurrent.futures import Executor

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
