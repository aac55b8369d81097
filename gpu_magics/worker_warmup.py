"""Warm a worker while it starts: a worker plugin that ``%gpucluster`` gives each worker it starts.

``setup`` runs in the worker process before the worker registers with its scheduler (on a dask-cuda worker,
after dask-cuda created the CUDA context). It starts the warm-up in a thread, so registration is not held up:
the thread loads dask.array, and on a GPU worker CuPy and the kernels of the seed workload (random normal,
add, strided slice, mean) on small chunks. ``collect`` (run in each worker through ``client.run``) waits for
the thread and returns what the warm-up saw. A worker that restarts warms again by itself.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from typing import Any

from distributed import WorkerPlugin

PLUGIN_NAME = "gpu-magics-warmup"
WARM_SHAPE = (512, 512)
WARM_CHUNKS = (256, 256)


def warm_here(gpu: bool) -> dict[str, Any]:
    """Load what the seed workload needs in this process; returns the pid, the seconds it took and, on a GPU
    worker, the device it warmed (model, memory, ``CUDA_VISIBLE_DEVICES`` entry)."""
    began = time.perf_counter()
    import dask
    import dask.array as da

    with dask.config.set({"array.backend": "cupy" if gpu else "numpy"}):
        x = da.random.normal(10, 1, size=WARM_SHAPE, chunks=WARM_CHUNKS)
        float((x + 1)[::2, ::2].mean().compute(scheduler="sync"))
    seen: dict[str, Any] = {"pid": os.getpid()}
    if gpu:
        import cupy

        cupy.cuda.runtime.deviceSynchronize()
        properties = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)
        name = properties["name"]
        free, total = cupy.cuda.runtime.memGetInfo()
        visible = os.environ.get("CUDA_VISIBLE_DEVICES", "")
        seen.update(
            gpu_name=name.decode() if isinstance(name, bytes) else str(name),
            gpu_memory_total=int(total),
            gpu_memory_used=int(total - free),
            gpu_device=visible.split(",")[0] or "0",
        )
    seen["warm_s"] = time.perf_counter() - began
    return seen


class WarmUp(WorkerPlugin):
    """Warms the worker in a thread from the moment it starts; ``wait`` returns what ``warm_here`` saw."""

    name = PLUGIN_NAME

    def __init__(self, gpu: bool) -> None:
        self.gpu = gpu
        self._thread: threading.Thread | None = None
        self._seen: dict[str, Any] = {}
        self._error: BaseException | None = None
        self._setup_at = 0.0

    def __getstate__(self) -> dict[str, Any]:  # travels to the worker process before it starts
        return {"gpu": self.gpu}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(bool(state["gpu"]))  # type: ignore[misc]

    def setup(self, worker: Any) -> None:
        self._setup_at = time.time()
        self._thread = threading.Thread(target=self._run, name="gpu-magics-warmup", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            self._seen = warm_here(self.gpu)
            self._seen.update(setup_at=self._setup_at, warmed_at=time.time(), process_started_at=_started_at())
        except BaseException as error:  # reported by wait(), in the kernel
            self._error = error

    def wait(self, timeout: float) -> dict[str, Any]:
        """What the warm-up saw, once it is done; ``TimeoutError`` after ``timeout`` seconds."""
        if self._thread is None:  # not set up (should not happen): warm now
            return warm_here(self.gpu)
        self._thread.join(timeout)
        if self._thread.is_alive():
            raise TimeoutError(f"the worker's warm-up took more than {timeout:g} s")
        if self._error is not None:
            raise self._error
        return dict(self._seen)


def _started_at() -> float:
    try:
        import psutil

        return float(psutil.Process().create_time())
    except Exception:
        return 0.0


async def collect(gpu: bool, timeout: float, dask_worker: Any) -> dict[str, Any]:
    """``client.run`` target: wait for this worker's warm-up (or warm it now, on a worker without the plugin)
    in a thread, so the worker keeps answering its scheduler meanwhile."""
    plugin = dask_worker.plugins.get(PLUGIN_NAME)
    if isinstance(plugin, WarmUp):
        return await asyncio.to_thread(plugin.wait, timeout)
    return await asyncio.to_thread(warm_here, gpu)
