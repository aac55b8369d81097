"""What a notebook's GPU memory cap is, read from what an admin or a user wrote: a size (``"8GiB"``, ``"20 GB"``)
or a share of each GPU's memory (``"25%"``); and how a cap on one GPU is split between the notebook's processes
there. Pure: no I/O, tested without GPUs.

The cap is per GPU: a notebook may hold at most that much on each GPU it uses, all its processes there together.
Each process gets an equal share (the kernel; the worker of a cluster the kernel started there; the SPMD rank there),
set as its allocators' own limits (``allocators``).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from gpu_magics.text.units import format_bytes

SERVER_CAP_ENV = "GPU_MAGICS_MEMORY_CAP"  # the server's cap, in the environment of the kernels it starts
SHARE_ENV = "GPU_MAGICS_MEMORY_SHARE"  # a worker's or rank's share of the cap, in bytes, where it starts
OFF = ("", "off", "none")
MIN_CAP = 2**26  # 64 MiB: below it no CUDA library does anything useful

_UNITS = {
    "": 1,
    "b": 1,
    "k": 10**3,
    "kb": 10**3,
    "m": 10**6,
    "mb": 10**6,
    "g": 10**9,
    "gb": 10**9,
    "t": 10**12,
    "tb": 10**12,
    "kib": 2**10,
    "mib": 2**20,
    "gib": 2**30,
    "tib": 2**40,
}
_SIZE = re.compile(r"^\s*(?P<number>[-+]?\d+(?:\.\d*)?|[-+]?\.\d+)\s*(?P<unit>[a-zA-Z]*)\s*$")
EXAMPLES = "a size like 8GiB or 20GB, a share of each GPU's memory like 25%, or off"


class CapError(ValueError):
    """A cap that cannot be: the message says what to write instead."""


@dataclass(frozen=True)
class MemoryCap:
    """A cap of ``size`` bytes, or of ``share`` (0 to 1) of each GPU's memory; ``by`` says who set it."""

    size: int | None = None
    share: float | None = None
    by: str = "server"  # "server" (the admin's) or "notebook" (the user's own, lower one)

    def on(self, gpu_memory: int) -> int:
        """The cap in bytes on a GPU of ``gpu_memory`` bytes (never above it)."""
        if self.size is not None:
            return min(self.size, gpu_memory)
        return int(gpu_memory * (self.share or 0.0))

    @property
    def text(self) -> str:
        """As it was written, tidied: ``8 GiB``, ``25%``."""
        if self.size is not None:
            return _size_text(self.size)
        return f"{(self.share or 0.0) * 100:g}%"

    def spec(self) -> str:
        """What ``parse_cap`` reads back to this cap (for an environment variable or a record)."""
        return str(self.size) if self.size is not None else f"{(self.share or 0.0) * 100:g}%"


def parse_cap(text: str, *, by: str = "server", gpu_memory: int | None = None) -> MemoryCap | None:
    """The cap ``text`` asks for (``None`` for ``off``); ``CapError`` with one line when it cannot be: not a size,
    negative or zero, under 64 MiB, or above ``gpu_memory`` (the smallest GPU's, where known)."""
    raw = str(text).strip()
    if raw.lower() in OFF:
        return None
    if raw.endswith("%"):
        try:
            percent = float(raw[:-1])
        except ValueError:
            raise CapError(f"memory cap {raw!r} is not a share: use {EXAMPLES}") from None
        if not math.isfinite(percent) or not 0 < percent <= 100:
            raise CapError(f"memory cap {raw!r}: a share of each GPU's memory is above 0% and at most 100%")
        return MemoryCap(share=percent / 100.0, by=by)
    found = _SIZE.match(raw)
    unit = found.group("unit").lower() if found else ""
    if found is None or unit not in _UNITS:
        raise CapError(f"memory cap {raw!r} is not a size: use {EXAMPLES}")
    value = float(found.group("number")) * _UNITS[unit]
    if value <= 0:
        raise CapError(f"memory cap {raw!r}: a cap is above zero (off lifts it)")
    if value < MIN_CAP:
        raise CapError(f"memory cap {raw!r} is under 64 MiB: give a unit, like 8GiB")
    size = int(value)
    if gpu_memory is not None and size > gpu_memory:
        raise CapError(
            f"memory cap {raw!r} is above the GPU's memory ({_size_text(gpu_memory)}): give at most that, "
            "or a share like 50%"
        )
    return MemoryCap(size=size, by=by)


def lower(first: MemoryCap | None, second: MemoryCap | None, gpu_memory: int) -> MemoryCap | None:
    """The lower of two caps on a GPU of ``gpu_memory`` bytes (the one that binds there); ``None`` when neither."""
    if first is None or second is None:
        return first or second
    return first if first.on(gpu_memory) <= second.on(gpu_memory) else second


def share(cap_bytes: int, processes: int) -> int:
    """Each process's share of ``cap_bytes`` when ``processes`` of the notebook use the GPU (at least one)."""
    return cap_bytes // max(1, processes)


def _size_text(size: int) -> str:
    return format_bytes(size)
