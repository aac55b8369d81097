"""A kernel without a GPU driving a cluster's GPUs: the dask settings of such a ``multi-gpu`` cell, results
brought back as NumPy, and one line for what cannot work here.

The graph is built here with NumPy metadata and made into CuPy chunks on the workers (``graphs.remote_gpus``);
``.compute()`` results are copied to host memory on the workers (``graphs.device.to_host``) before they travel,
since this kernel could not read a CuPy array. ``persist`` leaves the chunks on the workers' GPUs.
"""

from __future__ import annotations

import contextlib
import types
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import dask

from gpu_magics import gpus
from gpu_magics.gpurun.graphs import device, remote_gpus, tuning
from gpu_magics.text.errors import ClusterError

if TYPE_CHECKING:
    from distributed import Client

NOTE = (
    "this kernel has no GPU: arrays are built here with NumPy metadata, their chunks are made as CuPy on the "
    "workers' GPUs, and computed results come back as NumPy"
)
NEEDS_PACKAGE = (
    "%%gpurun multi-gpu: this kernel has no GPU, so array cells need gpu-magics installed where the cluster's "
    "scheduler and workers run (it makes the chunks there); install it there, or run on a kernel with a GPU"
)


def kernel_has_gpu() -> bool:
    """Whether this process can make CuPy arrays itself (a real GPU is visible; simulated ones are not)."""
    return gpus.inventory().unavailable_reason() is None


def settings() -> dict[str, Any]:
    """The dask settings of a GPU-less kernel's cell on GPU workers."""
    chosen: dict[str, Any] = {"array.backend": "numpy", "array_optimize": remote_gpus.optimize_for_remote_gpus}
    if dask.config.get("split_every", default=None) is None:
        chosen["split_every"] = tuning.REDUCTION_SPLIT_EVERY
    return chosen


def require_package_on_cluster(installed: bool) -> None:
    """The one-line error when the scheduler cannot import this package (it must run the graph rewrite)."""
    if not installed:
        raise ClusterError(NEEDS_PACKAGE)


@contextlib.contextmanager
def host_results(client: Client) -> Iterator[None]:
    """While the block runs, ``client.get`` (what ``.compute()`` calls) copies each result to host memory on
    its worker before gathering it."""
    original = client.get

    def get(self: Client, dsk: Any, keys: Any, sync: bool = True, **kwargs: Any) -> Any:
        packed = original(dsk, keys, sync=False, **kwargs)
        if not sync:
            return packed
        hosted = _map_futures(packed, lambda future: client.submit(device.to_host, future, pure=False))
        try:
            return client.gather(hosted)
        finally:
            _map_futures(packed, lambda future: future.release())

    # bound to the client, as dask.persist looks for the client behind the scheduler (``get.__self__``)
    client.get = types.MethodType(get, client)  # type: ignore[method-assign]
    try:
        yield
    finally:
        with contextlib.suppress(AttributeError):
            del client.get


def _map_futures(packed: Any, function: Callable[[Any], Any]) -> Any:
    if isinstance(packed, (list, tuple)):
        return type(packed)(_map_futures(item, function) for item in packed)
    if isinstance(packed, dict):
        return {key: _map_futures(item, function) for key, item in packed.items()}
    if hasattr(packed, "key") and hasattr(packed, "release"):
        return function(packed)
    return packed


_CUDA_MODULES = ("cupy", "cupyx", "cupy_backends", "cuda", "rmm")


def _raised_by_a_task(error: BaseException) -> bool:
    """Whether ``error`` came from a task on a worker: it was raised inside dask's ``compute``/``persist`` or
    distributed's result calls (dask shortens the traceback to those frames, then the task's own)."""
    frame = error.__traceback__
    while frame is not None:
        code = frame.tb_frame.f_code
        name = code.co_filename.replace("\\", "/")
        if ("/dask/" in name or "/distributed/" in name) and code.co_name in _REMOTE_CALLS:
            return True
        frame = frame.tb_next
    return False


_REMOTE_CALLS = frozenset({"compute", "persist", "result", "gather", "_gather", "get"})


def explain(error: BaseException) -> str | None:
    """One line for an error a GPU-less kernel's cell cannot avoid by retrying: CuPy called in this kernel,
    a CuPy result brought here, or the package missing on the workers; ``None`` for any other error."""
    missing = getattr(error, "name", None) if isinstance(error, ModuleNotFoundError) else None
    if _raised_by_a_task(error) and not (missing or "").startswith("gpu_magics"):
        return None  # a worker's error (its GPU ran out of memory, say): its own traceback says more
    text = f"{type(error).__name__}: {error}"
    module = type(error).__module__.split(".")[0]
    if missing and missing.split(".")[0] == "gpu_magics":
        return NEEDS_PACKAGE
    cupy_here = module in _CUDA_MODULES or (missing or "").split(".")[0] in ("cupy", "cupyx") or "cupy" in text
    if cupy_here or "CUDA" in text or "CURAND" in text:
        return (
            f"this kernel has no GPU, so CuPy cannot run in it ({text.splitlines()[0][:160]}); let dask make "
            "the arrays (da.random, da.ones, da.from_array, ...) so their chunks are made on the workers' GPUs, "
            "call CuPy inside map_blocks, and bring results back with .compute() (it returns NumPy here)"
        )
    return None
