"""Warming a cluster: in each worker while it starts (``WarmUp``), then from the kernel (``warm_workers``).

``setup`` runs in the worker process before the worker registers with its scheduler (on a dask-cuda worker,
after dask-cuda created the CUDA context). It starts the warm-up in a thread, so registration is not held up:
the thread loads dask.array, and on a GPU worker CuPy and the kernels of the seed workload (random normal,
add, strided slice, mean) on small chunks, then tells the kernel what it saw as an event (``WARM_TOPIC``), which
``WarmWatch`` hears: no round trip. ``collect`` (run in each worker through ``client.run``) waits for the thread
and returns what the warm-up saw, for clusters whose kernel did not watch. A worker that restarts warms again by
itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from distributed import WorkerPlugin

from gpu_magics.cluster.options import Kind
from gpu_magics.cluster.reading.inspection import scheduler_workers
from gpu_magics.text.units import dropped

if TYPE_CHECKING:
    from distributed import Client

PLUGIN_NAME = "gpu-magics-warmup"
WARM_TOPIC = "gpu-magics-warm"  # the event each worker's warm-up sends when it is done
WARM_SHAPE = (512, 512)
WARM_CHUNKS = (256, 256)


def warm_here(gpu: bool) -> dict[str, Any]:
    """Load what the seed workload needs in this process; returns the pid, the seconds it took and, on a GPU
    worker, the device it warmed (model, memory, ``CUDA_VISIBLE_DEVICES`` entry). A GPU worker without CuPy
    (a GPU node whose environment lacks it, simulated GPUs) warms as a CPU worker and says so (``cupy``: False):
    its chunks stay NumPy."""
    began = time.perf_counter()
    import dask
    import dask.array as da

    if gpu and not _cupy_here():
        return {**warm_here(False), "cupy": False}

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
        self._worker: Any = None
        self._done = threading.Event()

    def __getstate__(self) -> dict[str, Any]:  # travels to the worker process before it starts
        return {"gpu": self.gpu}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(bool(state["gpu"]))  # type: ignore[misc]

    def setup(self, worker: Any) -> None:
        self._setup_at = time.time()
        self._worker = worker
        self._thread = threading.Thread(target=self._run, name="gpu-magics-warmup", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            self._seen = warm_here(self.gpu)
            self._seen.update(setup_at=self._setup_at, warmed_at=time.time(), process_started_at=_started_at())
            said: dict[str, Any] = dict(self._seen)
        except BaseException as error:  # reported by wait(), in the kernel
            self._error = error
            said = {"error": f"{type(error).__name__}: {error}"}
        self._done.set()
        worker = self._worker
        if worker is None:  # set up without a worker (called directly): nobody to report to but wait()
            return
        try:  # thread-safe: the worker sends it from its own event loop
            _registered(worker, WARM_TIMEOUT)  # before that the worker drops what it is asked to send
            worker.log_event(WARM_TOPIC, {**said, "address": worker.address, "name": str(worker.name)})
        except (OSError, RuntimeError) as error:  # stream or loop closed: the kernel's wait says who did not report
            dropped("sending the warm-up's report", error)

    def wait(self, timeout: float) -> dict[str, Any]:
        """What the warm-up saw, once it is done; ``TimeoutError`` after ``timeout`` seconds."""
        if self._thread is None:  # not set up (should not happen): warm now
            return warm_here(self.gpu)
        if not self._done.wait(timeout):
            raise TimeoutError(f"the worker's warm-up took more than {timeout:g} s")
        if self._error is not None:
            raise self._error
        return dict(self._seen)


def _registered(worker: Any, timeout: float) -> None:
    """Wait (up to ``timeout`` s) until ``worker`` has its stream to the scheduler."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and hasattr(worker, "batched_stream"):
        stream = getattr(worker, "batched_stream", None)
        if stream is not None and getattr(stream, "comm", None) is not None:
            return
        time.sleep(0.005)


def _cupy_here() -> bool:
    import importlib.util

    return importlib.util.find_spec("cupy") is not None


_forked_at = 0.0  # when this process was forked (the workers fork from the worker server), by its own clock


def _note_fork() -> None:
    global _forked_at
    _forked_at = time.time()


os.register_at_fork(after_in_child=_note_fork)


def _started_at() -> float:
    """When this process began: the moment it was forked, where it was (exact), else the start time the system
    keeps (its base, the boot time, counts whole seconds)."""
    if _forked_at:
        return _forked_at
    try:
        import psutil

        return float(psutil.Process().create_time())
    except (ImportError, OSError):  # no psutil, or /proc unreadable
        return 0.0


async def collect(gpu: bool, timeout: float, dask_worker: Any) -> dict[str, Any]:
    """``client.run`` target: wait for this worker's warm-up (or warm it now, on a worker without the plugin)
    in a thread, so the worker keeps answering its scheduler meanwhile."""
    plugin = dask_worker.plugins.get(PLUGIN_NAME)
    if isinstance(plugin, WarmUp):
        return await asyncio.to_thread(plugin.wait, timeout)
    return await asyncio.to_thread(warm_here, gpu)


# -- in the kernel: wait for the workers' warm-up, then one round across the cluster ----------------------

WARM_TIMEOUT = 120.0  # seconds; a worker that dies while warming must not hang the magic


def import_here(gpu: bool) -> None:
    """Import here what the first result needs: dask.array and distributed's serializers, and for GPU workers
    CuPy (results come back as CuPy arrays). Creates no CUDA context."""
    _or_dropped("importing what the first result needs", lambda: _import_results_need(gpu))


def _import_results_need(gpu: bool) -> None:
    import dask.array  # noqa: F401
    import distributed.protocol.numpy

    if gpu:
        import cupy  # noqa: F401
        import distributed.protocol.cupy  # noqa: F401


def _or_dropped(what: str, step: Callable[[], None]) -> None:
    """Run ``step``; a failure only leaves the first cell slower (the task does it again, and says why)."""
    try:
        step()
    except Exception as error:  # a broken CUDA install fails any way, at import or at its first call
        dropped(what, error)


def prepare_here(gpu: bool, made: threading.Event) -> None:
    """While the worker processes start, make this process's CUDA context for GPU workers (their results come
    back as CuPy arrays; after ``import_here``). Once the cluster is made, collect garbage fully: starting a
    cluster leaves this process (which also hosts the scheduler) with many new long-lived objects, which would
    otherwise set off a full collection, 0.1-0.2 s on a GPU host, during the first cells that use the cluster.
    Off the critical path: this process mostly waits for its workers (their CUDA contexts, then their warm-up)
    meanwhile; a cell may use CuPy here at the same time (CUDA's context is shared by the process's threads)."""
    import_here(gpu)
    if gpu:
        _or_dropped("warming CuPy in the scheduler's process", _warm_cupy_here)
    made.wait(timeout=WARM_TIMEOUT)
    gc.collect()


def _warm_cupy_here() -> None:
    import cupy

    start_cuda_without_the_gil()
    cupy.zeros(1).sum()
    cupy.cuda.runtime.deviceSynchronize()


def start_cuda_without_the_gil() -> None:
    """Where this process has not started the CUDA driver yet: start it and make device 0's primary context (the
    one CuPy uses first) through ``ctypes``, which lets go of the GIL during each call. Through CuPy, the driver's
    start held the GIL: on a 4-GPU host its 1.2 s stopped this process's event loop, where the scheduler and the
    workers' nannies run, and the workers forked that much later. Anything that fails is left to CuPy."""
    import ctypes

    from gpu_magics.cluster.telemetry.process_memory import CUDA_ERROR_NOT_INITIALIZED

    try:
        driver = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return
    count, device, context = ctypes.c_int(), ctypes.c_int(), ctypes.c_void_p()
    if driver.cuDeviceGetCount(ctypes.byref(count)) != CUDA_ERROR_NOT_INITIALIZED:
        return  # started already (by CuPy, or any library the notebook used): its device choice stands
    if driver.cuInit(0) == 0 and driver.cuDeviceGet(ctypes.byref(device), 0) == 0:
        driver.cuDevicePrimaryCtxRetain(ctypes.byref(context), device)  # held for the process's life, as CuPy's


class WarmWatch:
    """In the kernel: hears each worker's warm-up end (``WARM_TOPIC``) as it happens, from the moment it is made
    (before the workers start), and counts them."""

    def __init__(self, client: Client, gpu: bool, heard: Callable[[int], None] | None = None) -> None:
        self.client = client
        self.gpu = gpu
        self.seen: dict[str, dict[str, Any]] = {}  # worker address -> what its warm-up saw
        self._heard = heard
        self._changed = threading.Condition()
        client.subscribe_topic(WARM_TOPIC, self._event)

    def _event(self, event: Any) -> None:
        _, message = event
        if not isinstance(message, dict) or "address" not in message:
            return
        with self._changed:
            self.seen[str(message["address"])] = dict(message)
            count = len(self.seen)
            self._changed.notify_all()
        if self._heard is not None:
            try:
                self._heard(count)
            except Exception as error:  # a listener never stops the warm-up
                dropped("telling a listener how many workers are warm", error)

    def wait(self, addresses: set[str], timeout: float, cancelled: threading.Event | None = None) -> dict[str, Any]:
        """What the warm-up of each worker at ``addresses`` saw, by worker name, once all have said; the first
        worker's failure as ``RuntimeError``; ``TimeoutError`` after ``timeout`` seconds (``cancelled``: ends the
        wait at once, with what came)."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while not addresses <= set(self.seen):
                left = deadline - time.monotonic()
                if left <= 0 or (cancelled is not None and cancelled.is_set()):
                    break
                self._changed.wait(min(left, 0.1))
        missing = addresses - set(self.seen)
        if missing and not (cancelled is not None and cancelled.is_set()):  # a lost event: ask those workers
            asked = self.client.run(collect, self.gpu, timeout, workers=sorted(missing), on_error="return")
            for address, found in asked.items():
                if isinstance(found, BaseException):
                    found = {"error": f"{type(found).__name__}: {found}"}
                self.seen[address] = {**found, "address": address, "name": self._name_of(address)}
        failed = [self.seen[a] for a in sorted(addresses) if a in self.seen and "error" in self.seen[a]]
        if failed:
            raise RuntimeError(f"worker {failed[0].get('name')}: {failed[0]['error']}")
        return {
            str(self.seen[a].get("name", a)): _without_event_keys(self.seen[a]) for a in addresses if a in self.seen
        }

    def _name_of(self, address: str) -> str:
        return str(scheduler_workers(self.client).get(address, {}).get("name", address))

    def close(self) -> None:
        from distributed.client import ClosedClientError

        with contextlib.suppress(ValueError, RuntimeError, ClosedClientError):  # not subscribed; the client closed
            self.client.unsubscribe_topic(WARM_TOPIC)


def _without_event_keys(message: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in message.items() if key not in ("address", "name")}


def warm_workers(
    client: Client,
    hardware: Kind,
    workers: list[str] | None = None,
    before_cluster_round: Callable[[], None] | None = None,
) -> tuple[dict[str, dict[str, Any]], float]:
    """Wait for each worker's warm-up (CUDA context and the seed workload's kernels, started with the worker by
    ``WarmUp``), call ``before_cluster_round``, then run the workload once across the cluster
    (moves a few small chunks between workers). Returns what each worker saw, by worker name, and the seconds
    it took. ``hardware``: ``gpu`` or ``cpu``, what the workers are."""

    began = time.perf_counter()
    gpu = hardware == "gpu"
    seen = client.run(collect, gpu, WARM_TIMEOUT, workers=workers)
    gpu = gpu and all(found.get("cupy", True) for found in seen.values())  # GPUs without CuPy: NumPy chunks
    if before_cluster_round is not None:
        before_cluster_round()
    if workers is None:
        _warm_round(client, gpu, len(seen))
    names = {address: str(info.get("name", address)) for address, info in scheduler_workers(client).items()}
    devices = {names.get(address, address): info for address, info in seen.items()}
    return devices, time.perf_counter() - began


def _warm_round(client: Client, gpu: bool, workers: int) -> None:
    # Like the seed workload, the result comes back to this process: with CuPy chunks that loads CuPy here and
    # creates this process's CUDA context (on its first GPU), which the first real result would otherwise pay.
    import dask
    import dask.array as da

    from gpu_magics import gpus

    # a kernel without a GPU (a hub's small pod) cannot make the CuPy metadata of such a graph: NumPy chunks warm
    # the workers' comms all the same (each worker's own warm-up made its CUDA context and kernels)
    gpu = gpu and gpus.inventory().unavailable_reason() is None
    threads = max(1, sum(client.nthreads().values()))
    rows = WARM_CHUNKS[0] * max(workers, 1) * min(threads, 8)
    with dask.config.set({"array.backend": "cupy" if gpu else "numpy"}):
        x = da.random.normal(10, 1, size=(rows, WARM_CHUNKS[1]), chunks=WARM_CHUNKS)
        float(client.compute((x + 1)[::2, ::2].mean()).result(timeout=WARM_TIMEOUT))
