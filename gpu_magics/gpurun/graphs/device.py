"""What the tasks of a GPU-less kernel's cell call inside the workers: make chunks on the worker's GPU and bring
results back to host memory.

The array library is CuPy, or the module ``GPU_MAGICS_DEVICE_ARRAYS`` names in the worker's environment (a
stand-in with CuPy's few functions used here: ``asarray``, ``asnumpy``, ``broadcast_to``, ``random``, ``ndarray``).
A worker where neither is usable (no CuPy, or no GPU) keeps NumPy chunks, so the same graph still runs there.
"""

from __future__ import annotations

import functools
import importlib
import os
import threading
from types import ModuleType
from typing import Any

import numpy as np

from gpu_magics.text.units import dropped

LIBRARY_VARIABLE = "GPU_MAGICS_DEVICE_ARRAYS"

# dask.array.random.Generator methods whose RandomState method has another name (or, for ``integers``, other
# arguments); the others are called by the same name
GENERATOR_TO_RANDOMSTATE = {"random": "random_sample"}


@functools.cache
def library() -> ModuleType | None:
    """The device array library of this process, or ``None`` where chunks stay in NumPy."""
    name = os.environ.get(LIBRARY_VARIABLE) or "cupy"
    if name == "cupy":
        from gpu_magics import gpus

        if gpus.inventory().unavailable_reason() is not None:  # no GPU, simulated ones, or no CuPy
            return None
    try:  # CuPy that fails any way at import (a broken CUDA install) was said by the inventory's reason above
        return importlib.import_module(name)
    except ImportError as error:  # the named stand-in, or CuPy, is not installed here: no device module
        dropped(f"importing {name}", error)
        return None


def to_device(value: Any) -> Any:
    """``value`` on this worker's GPU when it is a NumPy array (a broadcast view stays one: its one stored value
    is copied, not the repeated ones)."""
    xp = library()
    if xp is None or not isinstance(value, np.ndarray) or isinstance(value, xp.ndarray):
        return value
    if value.ndim and 0 in value.strides and value.size:
        stored = value[tuple(slice(0, 1) if step == 0 else slice(None) for step in value.strides)]
        return xp.broadcast_to(xp.asarray(np.ascontiguousarray(stored)), value.shape)
    return xp.asarray(value)


def to_host(value: Any) -> Any:
    """``value`` with device arrays copied to NumPy, through tuples, lists and dicts (what the kernel receives)."""
    if isinstance(value, (tuple, list)):
        return type(value)(to_host(item) for item in value)
    if isinstance(value, dict):
        return {key: to_host(item) for key, item in value.items()}
    xp = library()
    if xp is not None and isinstance(value, xp.ndarray) and type(value) is not np.ndarray:
        return xp.asnumpy(value)
    return value


_generators = threading.local()  # per thread: device id -> a CuPy RandomState kept for reseeding


def draw_reseeding(funcname: str, state_data: Any, size: Any, args: Any, kwargs: Any) -> Any:
    """dask's ``_apply_random`` with ``cupy.random.RandomState``, drawing the same numbers from a generator this
    thread keeps and reseeds: a new ``RandomState`` per chunk frees its cuRAND state when the chunk is done, and
    that waits for the whole GPU, so the next chunk's work cannot be queued meanwhile."""
    import cupy

    kept: dict[int, Any] = _generators.__dict__.setdefault("by_device", {})
    device_id = cupy.cuda.Device().id
    state = kept.get(device_id)
    if state is None:
        state = kept[device_id] = cupy.random.RandomState(state_data)
    else:
        state.seed(state_data)  # what the constructor does after creating the generator
    return getattr(state, funcname)(*args, size=size, **kwargs)


def draw_random_state(funcname: str, state_data: Any, size: Any, args: Any, kwargs: Any) -> Any:
    """dask's ``_apply_random`` with the device library's ``RandomState`` (the same seeds as a kernel with a GPU
    and ``array.backend = "cupy"`` gives it, so the same numbers)."""
    xp = library()
    if xp is not None and xp.__name__ == "cupy":
        return draw_reseeding(funcname, state_data, size, args, kwargs)
    state = (np.random if xp is None else xp.random).RandomState(state_data)
    return getattr(state, funcname)(*args, size=size, **kwargs)


def draw_generator(funcname: str, seed_sequence: Any, size: Any, args: Any, kwargs: Any) -> Any:
    """dask's ``_apply_random_func`` for ``default_rng`` on the device: a device ``RandomState`` seeded from the
    chunk's ``SeedSequence`` (CuPy's ``Generator`` lacks most distributions)."""
    xp = library()
    if xp is None:
        return getattr(np.random.default_rng(seed_sequence), funcname)(*args, size=size, **kwargs)
    seed = seed_sequence.generate_state(1, np.uint32)[0] if hasattr(seed_sequence, "generate_state") else 0
    state = xp.random.RandomState(int(seed))
    if funcname == "integers":
        return _integers(state, size, *args, **kwargs)
    return getattr(state, GENERATOR_TO_RANDOMSTATE.get(funcname, funcname))(*args, size=size, **kwargs)


def _integers(state: Any, size: Any, low: Any, high: Any = None, dtype: Any = np.int64, endpoint: bool = False) -> Any:
    if high is None:
        low, high = 0, low
    return state.randint(low, high + 1 if endpoint else high, size=size, dtype=dtype)
