"""Simulated GPU memory that processes hold: each one's CUDA context and its CuPy-like memory pool (arrays in
use, blocks cached), for the fake GPUs of ``monitor.fake``.

A GPU of a fake spec may say what a process holds there once it has computed on it, by the process's role::

    {"uuid": "GPU-...", "memory_used": 2e9,                   # everything else (other users, the driver)
     "pools": {"kernel": {"arrays": 1e9, "cached": 10e9, "context": 5e8},
               "worker": {"arrays": 0, "cached": 4e9, "context": 5e8}}}

A process takes its pool with ``hold`` (the kernel's reports and the workers' telemetry do, for their role) and
gives the cached part back with ``free`` (as ``cupy.get_default_memory_pool().free_all_blocks()`` would). The fake
NVML adds every pool held on a GPU to that GPU's memory in use and lists its process, so every process reading the
spec sees the same device. Processes share the state through the file ``$GPU_MAGICS_FAKE_STATE`` names (a JSON
object, written atomically under a lock); without it, the state lives in this process only. Pools of processes
that have ended are dropped when read.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import threading
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

__all__ = ["STATE_ENV", "FakeDeviceMemory", "FakePool", "device_memory", "spec_pools"]

STATE_ENV = "GPU_MAGICS_FAKE_STATE"
ROLES = ("kernel", "worker")


@dataclass(frozen=True)
class FakePool:
    """What one process holds on one simulated GPU (bytes)."""

    arrays: int
    cached: int
    context: int

    @property
    def total(self) -> int:
        return self.arrays + self.cached + self.context


State = dict[str, dict[int, FakePool]]  # GPU UUID -> pid -> pool


class FakeDeviceMemory:
    """The pools held on the simulated GPUs: in this process, or shared through a state file."""

    def __init__(self, path: str | os.PathLike[str] | None = None) -> None:
        self.path = Path(path) if path else None
        self._local: State = {}
        self._lock = threading.Lock()

    def held(self) -> State:
        """Every pool held now, by GPU UUID and pid (processes that have ended are left out)."""
        with self._locked(write=False) as state:
            return {uuid: dict(pools) for uuid, pools in state.items() if pools}

    def on(self, uuid: str) -> dict[int, FakePool]:
        """The pools held on the GPU ``uuid``, by pid."""
        return self.held().get(uuid, {})

    def hold(self, uuid: str, pool: FakePool, pid: int | None = None) -> FakePool:
        """Process ``pid`` (this one by default) holds ``pool`` on ``uuid`` unless it already holds one there;
        returns what it holds."""
        pid = os.getpid() if pid is None else pid
        with self._locked(write=False) as state:  # asked every report: write only the first time
            held = state.get(uuid, {}).get(pid)
        if held is not None:
            return held
        with self._locked(write=True) as state:
            return state.setdefault(uuid, {}).setdefault(pid, pool)

    def free(self, pid: int | None = None) -> dict[str, int]:
        """Give back what process ``pid`` (this one) caches on every GPU; returns the bytes released by UUID."""
        pid = os.getpid() if pid is None else pid
        released: dict[str, int] = {}
        with self._locked(write=True) as state:
            for uuid, pools in state.items():
                pool = pools.get(pid)
                if pool is not None and pool.cached:
                    released[uuid] = pool.cached
                    pools[pid] = FakePool(pool.arrays, 0, pool.context)
        return released

    def release(self, pid: int | None = None) -> None:
        """Process ``pid`` (this one) holds nothing any more (its context is gone, as when it exits)."""
        pid = os.getpid() if pid is None else pid
        with self._locked(write=True) as state:
            for pools in state.values():
                pools.pop(pid, None)

    @contextlib.contextmanager
    def _locked(self, *, write: bool) -> Iterator[State]:
        with self._lock:
            if self.path is None:
                _drop_ended(self._local)
                yield self._local
                return
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with open(f"{self.path}.lock", "a") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX if write else fcntl.LOCK_SH)
                state = _read(self.path)
                _drop_ended(state)
                yield state
                if write:
                    _write(self.path, state)


def _read(path: Path) -> State:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return {
        str(uuid): {int(pid): FakePool(**pool) for pid, pool in pools.items()}
        for uuid, pools in (data if isinstance(data, dict) else {}).items()
        if isinstance(pools, dict)
    }


def _write(path: Path, state: State) -> None:
    data = {uuid: {str(pid): asdict(pool) for pid, pool in pools.items()} for uuid, pools in state.items() if pools}
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    temporary.write_text(json.dumps(data), encoding="utf-8")
    os.replace(temporary, path)


def _drop_ended(state: State) -> None:
    for pools in state.values():
        for pid in [pid for pid in pools if not _alive(pid)]:
            del pools[pid]


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


_shared: dict[str | None, FakeDeviceMemory] = {}
_shared_lock = threading.Lock()


def device_memory() -> FakeDeviceMemory:
    """The simulated device memory of this process: the state file ``$GPU_MAGICS_FAKE_STATE`` names, or this
    process's own."""
    path = os.environ.get(STATE_ENV) or None
    with _shared_lock:
        memory = _shared.get(path)
        if memory is None:
            memory = _shared[path] = FakeDeviceMemory(path)
        return memory


def spec_pools(spec: Mapping[str, Any], role: str) -> dict[str, FakePool]:
    """GPU (or MIG instance) UUID -> the pool a process of ``role`` holds there once it computed on it, from a
    fake spec's ``pools`` entries (GPUs without a ``uuid`` have none)."""
    found: dict[str, FakePool] = {}
    for gpu in spec.get("gpus") or ():
        for entry in [gpu, *(gpu.get("mig") or ())] if isinstance(gpu, dict) else ():
            pool = ((entry or {}).get("pools") or {}).get(role)
            if isinstance(pool, dict) and entry.get("uuid"):
                figures = {key: int(pool.get(key, 0)) for key in ("arrays", "cached", "context")}
                found[str(entry["uuid"])] = FakePool(**figures)
    return found
