"""The one line a cell shows when an allocation would pass the notebook's memory cap: which GPU, the cap and who
set it, the share of the process that stopped and what it holds, and the biggest names holding memory there.

Installed around the shell's traceback formatter (as ``gpurun.live.interrupt_view``): CuPy's, PyTorch's and JAX's
out-of-memory errors, raised in the kernel or brought back from a worker, show as that line while a cap binds and
the error says the allocator's own limit stopped it (CuPy: "limit set to"; PyTorch: "allowed"; JAX: out of memory
where this process set its fraction). Every other error shows as before, an out-of-memory error of a full GPU too.
A rank's error comes as its type's name and message (``rank_line``).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gpu_magics import gpus
from gpu_magics.arrays.caps import allocators, notebook
from gpu_magics.arrays.caps.cap import MemoryCap
from gpu_magics.text.units import format_bytes

Names = Callable[[list[int]], dict[int, list[dict[str, Any]]]]  # device indices -> the biggest names there
_KEY = "_gpu_magics_over_cap"
_NAMES_SHOWN = 3

_CUPY = re.compile(
    r"allocating (?P<asked>[\d,]+) bytes \(allocated so far: (?P<held>[\d,]+) bytes, limit set to: (?P<limit>[\d,]+)"
)
_JAX = re.compile(r"Out of memory (?:while trying to )?allocat\w* (?P<asked>[\d.,]+) ?(?P<unit>[KMGT]iB|bytes|B)\b")
_TORCH_SIZE = r"[\d.]+ (?:[KMGT]iB|bytes)"  # PyTorch's format_size
_TORCH_GPU = re.compile(r"GPU (?P<gpu>\d+) has a total capacity")
_TORCH_ASKED = re.compile(rf"Tried to allocate (?P<asked>{_TORCH_SIZE})")
_TORCH_HELD = re.compile(rf"this process has (?P<held>{_TORCH_SIZE}) memory in use")
_TORCH_LIMIT = re.compile(rf"(?P<limit>{_TORCH_SIZE}) allowed")
_SCALE = {"bytes": 1, "B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40}


@dataclass(frozen=True)
class Stopped:
    """What an allocator's error says: bytes asked, held by the process, its limit, the GPU (where it says)."""

    asked: int
    held: int | None
    limit: int
    gpu: int | None


def stopped_by_limit(error: BaseException) -> Stopped | None:
    """The figures of a CuPy or PyTorch out-of-memory error raised by the allocator's own limit, else ``None``."""
    return read_stopped(type(error).__name__, str(error))


def read_stopped(kind: str, text: str) -> Stopped | None:
    """``stopped_by_limit`` for an error known by its type's name and message (a rank's, which came as text)."""
    if kind == "OutOfMemoryError" and (found := _CUPY.search(text)):
        limit = _number(found["limit"])
        if limit > 0:
            return Stopped(_number(found["asked"]), _number(found["held"]), limit, None)
    if "RESOURCE_EXHAUSTED" in text and (asked := _JAX.search(text)) and (fraction := allocators.jax_limit()):
        size = int(float(asked["asked"].replace(",", "")) * _SCALE.get(asked["unit"], 1))
        return Stopped(size, None, fraction, None)  # JAX's fraction, which this process set
    if "CUDA out of memory" in text and (limited := _TORCH_LIMIT.search(text)):
        gpu, asked, held = _TORCH_GPU.search(text), _TORCH_ASKED.search(text), _TORCH_HELD.search(text)
        return Stopped(
            _size(asked["asked"]) if asked else 0,
            _size(held["held"]) if held else None,
            _size(limited["limit"]),
            int(gpu["gpu"]) if gpu else None,
        )
    return None


def line_for(error: BaseException, names: Names | None = None) -> str | None:
    """The one line for ``error`` while a cap binds and the allocator's limit stopped it; ``None`` otherwise."""
    stopped = stopped_by_limit(error)
    found = notebook.shares()
    if stopped is None or not found:
        return None
    kernel = not _remote(error)
    devices = [d for d in gpus.inventory().devices() if d.uuid in found]
    named = next((d for d in devices if d.index == stopped.gpu), None) if kernel else None
    device = named or _near(devices, found, stopped.limit)
    if device is None:
        return None
    rows = _names(names, device.index) if kernel else []
    return _line(stopped, device, found[device.uuid], "this kernel" if kernel else "a worker of this notebook", rows)


def rank_line(kind: str, message: str, rank: int, gpu_uuid: str | None) -> str | None:
    """The one line for an SPMD rank's error (its type's name and message) that its share of the cap stopped."""
    stopped = read_stopped(kind, message)
    found = notebook.shares()
    if stopped is None or not found:
        return None
    devices = [d for d in gpus.inventory().devices() if d.uuid in found]
    device = next((d for d in devices if d.uuid == gpu_uuid), None) or _near(devices, found, stopped.limit)
    return None if device is None else _line(stopped, device, found[device.uuid], f"rank {rank}", [])


def _near(
    devices: list[gpus.GpuDevice], found: dict[str, tuple[int, int, MemoryCap]], limit: int
) -> gpus.GpuDevice | None:
    """The first GPU where a process's share is ``limit`` (within 1%)."""
    return next((d for d in devices if abs(found[d.uuid][0] - limit) <= max(2**20, limit // 100)), None)


def _line(stopped: Stopped, device: gpus.GpuDevice, shares: Any, process: str, rows: list[dict[str, Any]]) -> str:
    """The line, from ``shares``: (each process's share, the cap in bytes, the cap) on ``device``."""
    each, whole, cap = shares
    who = "the server's" if cap.by == "server" else "this notebook's own"
    held = f", holds {format_bytes(stopped.held)}" if stopped.held is not None else ""
    count = notebook.processes_on(device.uuid)
    split = f" (its share: {format_bytes(each)}, the cap split {count} ways)" if count > 1 else ""
    head = (
        f"GPU {device.index}: {process} would pass the notebook's memory cap of {format_bytes(whole)} ({who})"
        f"{split}: it asked for {format_bytes(stopped.asked)} more{held}"
    )
    if not rows:
        return f"{head}; %gpumemory lists what holds it"
    biggest = ", ".join(f"{row['name']} {format_bytes(row['bytes'])}" for row in rows[:_NAMES_SHOWN])
    return f"{head}; biggest: {biggest}; free what you no longer need ({rows[0]['give_back']}), or see %gpumemory"


def _remote(error: BaseException) -> bool:
    """Whether ``error`` was raised on a Dask worker and brought back: distributed's client raises it again with the
    worker's frames (its traceback runs through the client, or the worker)."""
    walk = error.__traceback__
    while walk is not None:
        name = walk.tb_frame.f_code.co_filename.replace("\\", "/")
        if name.endswith(("distributed/client.py", "distributed/worker.py")):
            return True
        walk = walk.tb_next
    return False


def _names(names: Names | None, index: int) -> list[dict[str, Any]]:
    if names is None:
        return []
    try:
        return names([index]).get(index) or []
    except Exception:  # the line goes on without them
        return []


def install(shell: Any, names: Names | None = None) -> None:
    """Show an out-of-memory error that the cap caused as its one line (``%load_ext``)."""
    formatter = shell.InteractiveTB
    if getattr(formatter, _KEY, None) is not None:
        return
    original = formatter.structured_traceback

    def structured_traceback(etype: Any, evalue: Any = None, *args: Any, **kwargs: Any) -> Any:
        if isinstance(evalue, BaseException):
            try:
                line = line_for(evalue, names)
            except Exception:  # the error shows as before
                line = None
            if line is not None:
                return [f"{type(evalue).__name__}: {line}"]
        return original(etype, evalue, *args, **kwargs)

    formatter.structured_traceback = structured_traceback
    setattr(formatter, _KEY, original)


def uninstall(shell: Any) -> None:
    formatter = shell.InteractiveTB
    original = getattr(formatter, _KEY, None)
    if original is not None:
        formatter.structured_traceback = original
        delattr(formatter, _KEY)


def _number(text: str) -> int:
    return int(text.replace(",", ""))


def _size(text: str) -> int:
    number, unit = text.split()
    return int(float(number) * _SCALE.get(unit, 1))
