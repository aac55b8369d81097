"""What this process holds on a GPU, three ways: memory in use by arrays, memory its pool caches (CuPy's
``MemoryPool``: ``used_bytes`` of ``total_bytes``; RMM's pool where RMM is in use) and the rest, its CUDA context
and libraries (NVML's figure for this process, less the pool). And giving the cached part back.

Runs in the kernel (its reports, ``%gpucluster free``) and in each worker (its telemetry, and ``free`` through
``client.run``). CuPy and RMM are only looked up in ``sys.modules``: nothing here imports them, and nothing runs on
a device where this process has no CUDA context yet (``process_memory.has_cuda_context``). On simulated GPUs
(``$GPU_MAGICS_SOURCE=fake:spec.json``) the pools are those the spec gives the process's role
(``monitor.fake_pools``).
"""

from __future__ import annotations

import contextlib
import functools
import os
import sys
from dataclasses import dataclass
from typing import Any

from gpu_magics.cluster.telemetry import process_memory
from gpu_magics.monitor.models import GpuReading
from gpu_magics.text.units import dropped

Role = str  # "kernel" or "worker": which part of a fake spec's pools applies


@dataclass(frozen=True)
class PoolFigures:
    """A memory pool on one device; ``arrays``/``cached`` are ``None`` where the pool does not say (RMM without
    statistics)."""

    arrays: int | None
    cached: int | None
    pool: int  # what the pool holds from the device: arrays + cached
    source: str  # "cupy", "rmm" or "fake"


@dataclass(frozen=True)
class ProcessMemory:
    """What this process holds on one GPU; ``None`` where unknown."""

    total: int | None = None  # all of it: NVML's figure for this process, else the pool
    arrays: int | None = None
    cached: int | None = None
    context: int | None = None  # the CUDA context and libraries: the total less the pool
    source: str | None = None  # where the figures come from: "cupy", "rmm", "fake" or "nvml"


def pool_on(ordinal: int, uuid: str, role: Role) -> PoolFigures | None:
    """The pool this process holds on its CUDA device ``ordinal`` (UUID ``uuid``), or ``None`` when it holds
    none there (no context yet, no CuPy or RMM in use)."""
    fake = _fake_spec()
    if fake is not None:
        return _fake_pool(fake, uuid, role)
    if not process_memory.has_cuda_context(ordinal):
        return None
    try:
        found = _rmm_pool(ordinal)
        if found is not None:
            return found
    except (AttributeError, TypeError, KeyError, RuntimeError) as error:  # CuPy's pool is read instead: RMM's API
        # differs between versions (a name, an argument, a count it lacks), or RMM failed (its errors are RuntimeErrors)
        dropped("reading RMM's pool", error)
    cupy = sys.modules.get("cupy")
    if cupy is None:
        return None
    try:
        pool = cupy.get_default_memory_pool()
        with cupy.cuda.Device(ordinal):
            used, total = int(pool.used_bytes()), int(pool.total_bytes())
    except RuntimeError:  # CUDA's error (CuPy's CUDARuntimeError): no figures
        return None
    return PoolFigures(used, total - used, total, "cupy")


def memory_on(reading: GpuReading, ordinal: int | None, role: Role) -> ProcessMemory:
    """What this process holds on ``reading``'s GPU (its CUDA device ``ordinal``; ``None``: do not look at its
    pool there), with NVML's figure for this process from the reading's process list when it has one."""
    nvml = next((p.used_memory for p in reading.processes or () if p.pid == os.getpid()), None)
    pool = pool_on(ordinal, reading.uuid, role) if ordinal is not None else None
    if pool is None:
        return ProcessMemory(total=nvml, source="nvml" if nvml is not None else None)
    context = nvml - pool.pool if nvml is not None and nvml >= pool.pool else None
    return ProcessMemory(nvml if nvml is not None else pool.pool, pool.arrays, pool.cached, context, pool.source)


@dataclass(frozen=True)
class Freed:
    """What giving the cached memory back did on one device."""

    released: int  # bytes
    kept: str | None = None  # why some stays (an RMM pool does not shrink)


def free_on(ordinal: int, uuid: str, role: Role) -> Freed | None:
    """Give back what this process's pool caches on device ``ordinal``; ``None`` where it holds no pool."""
    before = pool_on(ordinal, uuid, role)
    if before is None:
        return None
    if before.source == "fake":
        from gpu_magics.monitor.fake_pools import device_memory

        return Freed(device_memory().free().get(uuid, 0))
    if before.source == "rmm":
        return Freed(0, "RMM's pool keeps its memory until the process ends (restart the workers to give it back)")
    cupy = sys.modules["cupy"]
    with cupy.cuda.Device(ordinal):
        cupy.get_default_memory_pool().free_all_blocks()
    with contextlib.suppress(RuntimeError):  # CuPy's CUDARuntimeError: the device pool was freed all the same
        cupy.get_default_pinned_memory_pool().free_all_blocks()
    after = pool_on(ordinal, uuid, role)
    return Freed(max(0, before.pool - (after.pool if after is not None else 0)))


def free_worker(dask_worker: Any = None) -> dict[str, Any]:
    """``client.run`` target: give back what this worker's pool caches on the device it computes on (its first);
    returns ``{"released": bytes, "kept": why or None}``."""
    from gpu_magics.monitor.sources import default_source

    source = default_source()
    try:
        readings = source.read(slow=False)[0]
    finally:
        source.close()
    first = next((reading for reading in readings if reading.index == 0 and reading.error is None), None)
    freed = free_on(0, first.uuid, "worker") if first is not None else None
    return {"released": freed.released if freed else 0, "kept": freed.kept if freed else None}


# -- simulated GPUs ------------------------------------------------------------------------------------


def free_workers(client: Any) -> tuple[int, int, list[str]]:
    """In the kernel: have every worker of ``client``'s cluster run ``free_worker``: (bytes released, workers that
    answered, why some memory stays)."""
    answers = client.run(free_worker, on_error="return")
    released, kept, answered = 0, set(), 0
    for answer in answers.values():
        if isinstance(answer, dict):
            answered += 1
            released += int(answer.get("released") or 0)
            if answer.get("kept"):
                kept.add(str(answer["kept"]))
    return released, answered, sorted(kept)


def _fake_spec() -> dict[str, Any] | None:
    from gpu_magics.monitor.sources import source_from_env

    choice = source_from_env()
    if not choice.simulated:
        return None
    return _load_spec(choice.spec) if choice.spec else {}


@functools.lru_cache(maxsize=4)
def _load_spec(path: str) -> dict[str, Any]:
    from gpu_magics.monitor.fake import load_spec

    try:
        return load_spec(path)
    except (OSError, ValueError):
        return {}


def _fake_pool(spec: dict[str, Any], uuid: str, role: Role) -> PoolFigures | None:
    from gpu_magics.monitor.fake_pools import device_memory, spec_pools

    pool = spec_pools(spec, role).get(uuid)
    if pool is None:
        return None
    held = device_memory().hold(uuid, pool)  # computing on it once is enough to hold it from then on
    return PoolFigures(held.arrays, held.cached, held.arrays + held.cached, "fake")


def _rmm_pool(ordinal: int) -> PoolFigures | None:
    rmm = sys.modules.get("rmm")
    if rmm is None:
        return None
    resource = rmm.mr.get_per_device_resource(ordinal)
    arrays = None
    if hasattr(resource, "get_allocation_counts"):  # a statistics adaptor: its upstream is the pool
        arrays = int(resource.get_allocation_counts()["current_bytes"])
        resource = resource.get_upstream()
    if not hasattr(resource, "pool_size"):
        return None
    pool = int(resource.pool_size())
    return PoolFigures(arrays, None if arrays is None else max(0, pool - arrays), pool, "rmm")
