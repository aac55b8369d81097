"""Which CUDA devices this process can use, seen through CuPy (imported only when asked)."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

CUPY_INSTALL = "pip install 'gpu-magics[cuda12]' (or [cuda13])"


@dataclass(frozen=True)
class GpuDevice:
    """One CUDA device as this process numbers it (after ``CUDA_VISIBLE_DEVICES``)."""

    index: int
    name: str
    memory_total: int


class GpuInventory(Protocol):
    """Where the list of usable GPUs comes from."""

    def devices(self) -> tuple[GpuDevice, ...]:
        """The usable devices; empty when there are none."""
        ...

    def unavailable_reason(self) -> str | None:
        """Why there are no usable devices, or ``None`` when there are some."""
        ...


class CupyInventory:
    """The devices CuPy can use; asks once per process, on first use."""

    @functools.cached_property
    def _probe(self) -> tuple[tuple[GpuDevice, ...], str | None]:
        try:
            import cupy
        except ImportError:
            return (), "CuPy is not installed"
        except Exception as error:  # a broken CUDA install can fail at import
            return (), f"CuPy failed to load: {error}"
        try:
            count = int(cupy.cuda.runtime.getDeviceCount())
        except Exception as error:
            return (), f"no CUDA device is visible ({_one_line(error)})"
        if count == 0:
            return (), "no CUDA device is visible"
        found = []
        for index in range(count):
            properties = cupy.cuda.runtime.getDeviceProperties(index)
            name = properties["name"]
            found.append(
                GpuDevice(
                    index=index,
                    name=name.decode() if isinstance(name, bytes) else str(name),
                    memory_total=int(properties["totalGlobalMem"]),
                )
            )
        return tuple(found), None

    def devices(self) -> tuple[GpuDevice, ...]:
        return self._probe[0]

    def unavailable_reason(self) -> str | None:
        return self._probe[1]


class StaticInventory:
    """A fixed list of devices: for tests, and for describing machines that are not this one."""

    def __init__(self, devices: Sequence[GpuDevice] = (), reason: str | None = None) -> None:
        self._devices = tuple(devices)
        self._reason = reason if not self._devices else None
        if not self._devices and self._reason is None:
            self._reason = "no CUDA device is visible"

    def devices(self) -> tuple[GpuDevice, ...]:
        return self._devices

    def unavailable_reason(self) -> str | None:
        return self._reason


_inventory: GpuInventory = CupyInventory()


def inventory() -> GpuInventory:
    """The inventory in use."""
    return _inventory


def set_inventory(new: GpuInventory) -> GpuInventory:
    """Replace the inventory (tests, or after the visible devices changed); returns the previous one."""
    global _inventory
    previous, _inventory = _inventory, new
    return previous


def describe(devices: Sequence[GpuDevice]) -> str:
    """``"1x NVIDIA H200"``, ``"4x NVIDIA H200"`` or ``"1x NVIDIA H100, 1x NVIDIA A100"``."""
    counts: dict[str, int] = {}
    for device in devices:
        counts[device.name] = counts.get(device.name, 0) + 1
    return ", ".join(f"{count}x {name}" for name, count in counts.items())


def synchronize(indices: Sequence[int]) -> None:
    """Wait until all work queued on the given devices has finished."""
    if not indices:
        return
    import cupy

    for index in indices:
        cupy.cuda.Device(index).synchronize()


def _one_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return text[0] if text else type(error).__name__
