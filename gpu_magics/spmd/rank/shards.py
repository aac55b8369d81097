"""A persisted dask array in the ranks: ``gpu_magics.spmd.push(x=x)`` in the kernel gives every rank ``x`` as a
``DaskShards`` (where each chunk is and which rank gets it, no data), and ``gpu_magics.spmd.shards(x)`` in a rank
fetches that rank's chunks from the rank's own worker, the process it is a child of, as the workers fetch data from
each other (distributed's ``get_data`` with its acknowledgement), so no chunk passes through the kernel.

Chunks come back as the worker holds them: NumPy arrays from NumPy chunks, CuPy arrays on the rank's own GPU
(``LOCAL_RANK``, which the rank's ``CUDA_VISIBLE_DEVICES`` lists in local-rank order) from CuPy chunks. Each call
fetches anew; keep what it returns.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import os
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

WORKER_ENV = "GPU_MAGICS_SPMD_WORKER"  # the address of the rank's own worker (set by the kernel's world)
BATCH_BYTES = 256 * 2**20  # bytes of chunks asked for in one request (each is made an array before the next)
BUSY_WAIT_S = 120.0  # how long a worker may answer "busy" (too many transfers at once) before the fetch fails


@dataclass(frozen=True)
class Chunk:
    key: Any  # the dask key the chunk is held under on its rank's worker
    index: tuple[slice, ...]  # its place in the whole array
    rank: int
    nbytes: int


@dataclass(frozen=True)
class DaskShards:
    """A persisted dask array as the ranks have it after ``spmd.push``: its shape, dtype and chunk type, and each
    chunk's place, key and rank. ``gpu_magics.spmd.shards(x)`` gives this rank's chunks."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    chunk_type: str  # "numpy.ndarray", "cupy.ndarray"
    chunks: tuple[Chunk, ...]
    workers: tuple[tuple[int, str], ...]  # (rank, its worker's address) when pushed

    @property
    def nbytes(self) -> int:
        return sum(chunk.nbytes for chunk in self.chunks)

    def __repr__(self) -> str:
        ranks = sorted(rank for rank, _ in self.workers)
        return (
            f"<dask array {self.name} {self.shape} {self.dtype} ({self.chunk_type}), {len(self.chunks)} chunks over "
            f"{len(ranks)} rank{'s' * (len(ranks) != 1)}: gpu_magics.spmd.shards({self.name}) gives this rank's>"
        )


def shards(x: DaskShards, concatenate: bool = False) -> Any:
    """This rank's chunks of ``x`` as ``[(global slices, array), ...]`` in the array's order, fetched from the
    rank's own worker. ``concatenate=True``: ``(rows, array)``, the chunks joined along the first axis, where
    ``rows`` is a tuple of the global row ranges they cover (one ``slice`` where they are contiguous;
    ``numpy.r_[rows]`` gives the row numbers); it needs one chunk along every other axis."""
    if not isinstance(x, DaskShards):
        raise TypeError(
            f"shards() takes a persisted dask array pushed to the ranks with gpu_magics.spmd.push(x=x), not a "
            f"{type(x).__name__}"
        )
    if concatenate:
        _check_joinable(x)
    rank, address = _here()
    planned = dict(x.workers).get(rank)
    if planned != address:
        then = "no part of it" if planned is None else f"worker {planned}"
        raise LookupError(
            f"{x.name} was pushed to other ranks (rank {rank} then had {then}, its worker is {address} now); "
            f"push it again with gpu_magics.spmd.push({x.name}={x.name})"
        )
    mine = sorted((chunk for chunk in x.chunks if chunk.rank == rank), key=lambda chunk: _starts(chunk.index))
    arrays: dict[Any, Any] = {}
    with _own_device(x):
        for batch in _batches(mine):
            arrays.update(_fetch(x, address, [chunk.key for chunk in batch]))
        pairs = [(chunk.index, arrays.pop(chunk.key)) for chunk in mine]
        return _joined(x, pairs) if concatenate else pairs


def _here() -> tuple[int, str]:
    address = os.environ.get(WORKER_ENV)
    if not address or "RANK" not in os.environ:
        raise RuntimeError("shards() runs in a rank (a %%gpurun spmd cell), where it fetches from the rank's worker")
    return int(os.environ["RANK"]), address


def _starts(index: tuple[slice, ...]) -> tuple[int, ...]:
    return tuple(int(part.start or 0) for part in index)


def _batches(chunks: Sequence[Chunk]) -> Iterator[list[Chunk]]:
    batch: list[Chunk] = []
    size = 0
    for chunk in chunks:
        if batch and size + chunk.nbytes > BATCH_BYTES:
            yield batch
            batch, size = [], 0
        batch.append(chunk)
        size += chunk.nbytes
    if batch:
        yield batch


@contextlib.contextmanager
def _own_device(x: DaskShards) -> Iterator[None]:
    """CuPy chunks are made on this rank's own GPU (``LOCAL_RANK``), whichever device is current."""
    if not x.chunk_type.startswith("cupy") or os.environ.get("GPU_MAGICS_SPMD_DEVICE") != "gpu":
        yield
        return
    import cupy

    with cupy.cuda.Device(int(os.environ.get("LOCAL_RANK", "0"))):
        yield


def _fetch(x: DaskShards, address: str, keys: list[Any]) -> dict[Any, Any]:
    """``keys`` from the worker at ``address``, made arrays here (in this thread, so on this rank's device)."""
    from distributed.protocol import Serialized
    from distributed.protocol.serialize import merge_and_deserialize

    found = _run(_get_data(address, keys))
    missing = [key for key in keys if key not in found]
    if missing:
        raise LookupError(
            f"{len(missing)} of this rank's chunks of {x.name} are no longer on its worker {address} (released, or "
            f"the worker restarted, since the push); persist the array again and push it again"
        )
    return {
        # a value larger than the transfer shard (distributed.comm.shard) came in several frames: join them first
        key: merge_and_deserialize(value.header, value.frames) if isinstance(value, Serialized) else value
        for key, value in found.items()
    }


def _run(coroutine: Any) -> Any:
    """Run ``coroutine`` to its end from plain code, also where the cell itself runs in an event loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coroutine)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coroutine).result()


async def _get_data(address: str, keys: list[Any]) -> dict[Any, Any]:
    """The worker's ``get_data`` as another worker calls it (its reply acknowledged), retried while it is busy;
    the values stay serialized (``Serialized``) until the caller makes them arrays."""
    from distributed.core import ConnectionPool
    from distributed.worker import get_data_from_worker

    pool = await ConnectionPool(deserialize=False)
    try:
        deadline = time.monotonic() + BUSY_WAIT_S
        pause = 0.05
        while True:
            reply = await get_data_from_worker(pool, keys, address, who=f"gpu-magics rank {os.environ.get('RANK')}")
            if reply["status"] == "OK":
                return dict(reply["data"])
            if time.monotonic() > deadline:
                raise TimeoutError(f"worker {address} stayed busy with other transfers for {BUSY_WAIT_S:.0f} s")
            await asyncio.sleep(pause)
            pause = min(1.0, pause * 2)
    finally:
        await pool.close()


def _check_joinable(x: DaskShards) -> None:
    for chunk in x.chunks:
        if any(part.start != 0 or part.stop != size for part, size in zip(chunk.index[1:], x.shape[1:], strict=True)):
            raise ValueError(
                f"shards({x.name}, concatenate=True) joins chunks along the first axis only, and {x.name} has "
                f"several chunks along another; rechunk it so (x.rechunk({{1: -1}})) before persisting, or take "
                f"shards({x.name}) chunk by chunk"
            )


def _joined(x: DaskShards, pairs: list[tuple[tuple[slice, ...], Any]]) -> tuple[tuple[slice, ...], Any]:
    rows: list[slice] = []
    for index, _ in pairs:
        first = index[0]
        if rows and rows[-1].stop == first.start:
            rows[-1] = slice(rows[-1].start, first.stop)
        else:
            rows.append(slice(first.start, first.stop))
    if len(pairs) == 1:
        return tuple(rows), pairs[0][1]
    module = _array_module(x)
    if not pairs:
        return (), module.empty((0, *x.shape[1:]), dtype=x.dtype)
    return tuple(rows), module.concatenate([array for _, array in pairs])


def _array_module(x: DaskShards) -> Any:
    if x.chunk_type.startswith("cupy"):
        import cupy

        return cupy
    import numpy

    return numpy
