"""Keep this process within its share of the notebook's cap through its allocators' own limits: CuPy's memory pool
(``set_limit``, and ``CUPY_GPU_MEMORY_LIMIT`` for pools not made yet), PyTorch's caching allocator
(``set_per_process_memory_fraction``, set when PyTorch starts CUDA), JAX's (``XLA_PYTHON_CLIENT_MEM_FRACTION``,
read once, when JAX starts its GPU backend). RMM's pool on a worker is sized by dask-cuda (``rmm_maximum_pool_size``).

What is allocated outside them (``cudaMalloc`` called directly, a library with its own allocator, CUDA contexts,
cuBLAS workspaces) is not stopped: the cap binds the allocators, not the GPU.

No CUDA work happens here unless a library already started it: a limit for a GPU this process has no context on
is left to the environment and to the hook that runs when PyTorch starts CUDA.
"""

from __future__ import annotations

import contextlib
import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from types import ModuleType
from typing import Any

from gpu_magics.arrays.caps.cap import SHARE_ENV
from gpu_magics.text.units import dropped

CUPY_ENV = "CUPY_GPU_MEMORY_LIMIT"
JAX_ENV = "XLA_PYTHON_CLIENT_MEM_FRACTION"

_lock = threading.RLock()
_limits: dict[int, int] = {}  # this process's CUDA ordinal -> bytes
_totals: dict[int, int] = {}  # this process's CUDA ordinal -> the GPU's memory
_jax_set: list[str] = []  # the JAX fraction set here (empty: the user's, or none), taken back when the cap lifts


def limit_this_process(limits: Mapping[int, int], totals: Mapping[int, int]) -> None:
    """Limit this process's allocators to ``limits`` (bytes by CUDA ordinal; an empty mapping lifts them), on GPUs
    of ``totals`` bytes. Never raises: a library that refuses keeps its own limit. One change at a time (the
    kernel's cell thread and its cluster's start may both ask)."""
    with _lock:
        _limit(limits, totals)


def _limit(limits: Mapping[int, int], totals: Mapping[int, int]) -> None:
    _limits.clear()
    _limits.update(limits)
    _totals.update(totals)
    smallest = min(limits.values()) if limits else None
    if smallest is None:
        os.environ.pop(CUPY_ENV, None)
    else:
        os.environ[CUPY_ENV] = str(smallest)  # for pools CuPy makes later (it makes them all at once)
    _limit_jax_env()
    if "cupy" in sys.modules:
        _limit_cupy()
    if "torch" in sys.modules:
        _limit_torch(sys.modules["torch"])
    else:
        after_import("torch", _limit_torch)


def limits() -> dict[int, int]:
    """The limits in force here (bytes by CUDA ordinal)."""
    return dict(_limits)


def jax_limit() -> int:
    """The bytes JAX may take here on its first GPU by the fraction this process set (0: it set none)."""
    if not _jax_set or os.environ.get(JAX_ENV) != _jax_set[0] or not _totals:
        return 0
    ordinal = min(_totals)
    return int(float(_jax_set[0]) * _totals[ordinal])


def share_env(share: int, total: int) -> dict[str, str]:
    """The environment that gives a process started now its ``share`` of a GPU of ``total`` bytes, for every GPU
    it sees (``limit_from_env`` reads it back there)."""
    return {SHARE_ENV: f"{share}/{total}", CUPY_ENV: str(share), JAX_ENV: f"{min(1.0, share / total):.4f}"}


def limit_from_env(visible: int) -> int | None:
    """In a process started with ``share_env``: limit its allocators on its ``visible`` GPUs; the share, or
    ``None`` where it has none (or a malformed one)."""
    found = os.environ.get(SHARE_ENV, "")
    try:
        share, total = (int(part) for part in found.split("/"))
    except ValueError:
        return None
    ordinals = range(max(1, visible))
    limit_this_process({o: share for o in ordinals}, {o: total for o in ordinals})
    return share


def _limit_cupy() -> None:
    from gpu_magics.cluster.telemetry.process_memory import primary_contexts

    try:
        import cupy

        pool = cupy.get_default_memory_pool()
        active = primary_contexts(sorted(set(_limits) | set(_totals))) or set()
        for ordinal in sorted(active):
            with cupy.cuda.Device(ordinal):
                pool.set_limit(size=_limits.get(ordinal, 0))
    except (RuntimeError, ValueError, ImportError, OSError) as error:  # an old CuPy, a driver that refuses
        dropped("setting CuPy's memory pool limit", error, once=True)


def _limit_torch(torch: ModuleType) -> None:
    """Set PyTorch's fraction on every limited GPU now if it started CUDA, else when it does (its own lazy call)."""
    cuda = getattr(torch, "cuda", None)
    if cuda is None:
        return
    if cuda.is_initialized():
        _torch_fractions(cuda)
    else:
        queue: Callable[[Callable[[], None]], None] | None = getattr(cuda, "_lazy_call", None)
        if queue is not None:
            queue(lambda: _torch_fractions(cuda))


def _torch_fractions(cuda: Any) -> None:
    try:
        for ordinal in range(cuda.device_count()):
            total = _totals.get(ordinal) or int(cuda.get_device_properties(ordinal).total_memory)
            limit = _limits.get(ordinal)
            fraction = 1.0 if limit is None else min(1.0, limit / total)
            cuda.set_per_process_memory_fraction(fraction, ordinal)
    except (RuntimeError, ValueError, AssertionError) as error:  # PyTorch refused: it keeps its limit
        dropped("setting PyTorch's memory fraction", error, once=True)


def _limit_jax_env() -> None:
    """JAX's fraction, where JAX has not started its GPU backend yet and the user chose no lower one."""
    if _jax_set and os.environ.get(JAX_ENV) == _jax_set[0]:
        os.environ.pop(JAX_ENV)
    _jax_set.clear()
    fractions = [_limits[o] / _totals[o] for o in _limits if _totals.get(o)]
    if not fractions:
        return
    chosen = os.environ.get(JAX_ENV)
    try:
        if chosen is not None and float(chosen) <= min(fractions):
            return
    except ValueError:
        pass
    _jax_set.append(f"{min(fractions):.4f}")
    os.environ[JAX_ENV] = _jax_set[0]


class _Then(importlib.abc.Loader):
    """A module's own loader, then ``then(module)``."""

    def __init__(self, loader: importlib.abc.Loader, then: Callable[[ModuleType], None]) -> None:
        self._loader, self._then = loader, then

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self._loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        module.__loader__ = self._loader
        self._loader.exec_module(module)
        try:
            self._then(module)
        except (RuntimeError, ValueError, AttributeError, ImportError) as error:  # the import stands
            dropped(f"the hook after importing {module.__name__}", error, once=True)


class _AfterImport(importlib.abc.MetaPathFinder):
    """Finds nothing itself: wraps the loader of ``name`` the other finders find, once."""

    def __init__(self, name: str, then: Callable[[ModuleType], None]) -> None:
        self.name, self.then = name, then

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != self.name:
            return None
        _remove(self)
        spec = importlib.util.find_spec(fullname)
        if spec is not None and spec.loader is not None:
            spec.loader = _Then(spec.loader, self.then)
        return spec


def after_import(name: str, then: Callable[[ModuleType], None]) -> None:
    """Call ``then(module)`` once ``name`` is imported (a top-level module not imported yet); replaces an earlier
    hook for ``name``."""
    for finder in list(sys.meta_path):
        if isinstance(finder, _AfterImport) and finder.name == name:
            _remove(finder)
    sys.meta_path.insert(0, _AfterImport(name, then))


def _remove(finder: object) -> None:
    with contextlib.suppress(ValueError):
        sys.meta_path.remove(finder)  # type: ignore[arg-type]
