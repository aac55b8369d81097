"""THE inventory of the GPUs this process can see: index, UUID, CUDA id, name, memory.

Built on the monitor's source (``monitor.sources``), so it follows ``CUDA_VISIBLE_DEVICES`` the way CUDA does
(indices, ``GPU-``/``MIG-`` UUIDs and their prefixes, MIG instances) and ``$GPU_MAGICS_SOURCE=fake:N`` makes
the same N simulated GPUs appear here, in the monitor panels and in the side panel. Nothing else in the
package enumerates devices: the backends, ``%gpucluster``, the displays and the start script ask this module.
Reading happens once per process, on first use (one NVML read, no CUDA context); CuPy is imported only when a
caller asks whether cells can run on the GPUs.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from gpu_magics.text.units import dropped

CUPY_INSTALL = "pip install 'gpu-magics[cuda12]' (or [cuda13])"


@dataclass(frozen=True)
class GpuDevice:
    """One device (a GPU or a MIG instance) as this process numbers it (after ``CUDA_VISIBLE_DEVICES``)."""

    index: int
    name: str
    memory_total: int | None  # bytes
    uuid: str = ""
    cuda_id: str = ""  # what a worker's CUDA_VISIBLE_DEVICES names it by ("2", "GPU-...", "MIG-...")


class GpuInventory(Protocol):
    """Which GPUs exist here and whether cells can run on them."""

    @property
    def simulated(self) -> bool:
        """Whether the devices are simulated (``$GPU_MAGICS_SOURCE=fake...``)."""
        ...

    def devices(self) -> tuple[GpuDevice, ...]:
        """The visible devices (simulated ones included); empty when there are none."""
        ...

    def unavailable_reason(self) -> str | None:
        """Why cells cannot run on these devices (none visible, simulated, no CuPy), or ``None`` when they can."""
        ...


class SourceInventory:
    """The devices the monitor's source reports, read once on first use."""

    def __init__(self, source_text: str | None = None) -> None:
        from gpu_magics.monitor.sources import SOURCE_ENV, parse_source

        self._text = os.environ.get(SOURCE_ENV) if source_text is None else source_text
        try:
            self._choice = parse_source(self._text)
            self._bad_source: str | None = None
        except ValueError as error:
            from gpu_magics.monitor.sources import SourceChoice

            self._choice, self._bad_source = SourceChoice(), str(error)

    @property
    def simulated(self) -> bool:
        return self._choice.simulated

    @functools.cached_property
    def _read(self) -> tuple[tuple[GpuDevice, ...], str | None]:
        from gpu_magics.monitor.sources import make_source

        if self._bad_source is not None:
            return (), self._bad_source
        env = os.environ.get("CUDA_VISIBLE_DEVICES")
        source = make_source(self._choice.kind, **self._choice.options(), visible_devices=env)
        try:
            readings, status = source.read(slow=False)
        finally:
            source.close()
        entries = _visible_entries(env)
        found: list[GpuDevice] = []
        for reading in readings:
            if reading.error is not None:
                continue
            if entries is not None and reading.index < len(entries):
                cuda_id = entries[reading.index]
            elif reading.mig_parent is None and reading.nvml_index is not None:
                cuda_id = str(reading.nvml_index)
            else:
                cuda_id = reading.uuid
            found.append(
                GpuDevice(
                    index=len(found),
                    name=reading.name,
                    memory_total=reading.memory_total,
                    uuid=reading.uuid,
                    cuda_id=cuda_id,
                )
            )
        reason = None if found else (status or "no CUDA device is visible")
        return tuple(found), reason

    def devices(self) -> tuple[GpuDevice, ...]:
        return self._read[0]

    def unavailable_reason(self) -> str | None:
        found, reason = self._read
        if not found:
            return reason
        if self.simulated:
            return simulated_reason(len(found), self._text)
        return _cupy_reason()


class StaticInventory:
    """A fixed list of devices: for tests, and for describing machines that are not this one."""

    def __init__(self, devices: Sequence[GpuDevice] = (), reason: str | None = None, simulated: bool = False) -> None:
        self._devices = tuple(devices)
        self._reason = reason if not self._devices else None
        self._simulated = simulated
        if not self._devices and self._reason is None:
            self._reason = "no CUDA device is visible"

    @property
    def simulated(self) -> bool:
        return self._simulated

    def devices(self) -> tuple[GpuDevice, ...]:
        return self._devices

    def unavailable_reason(self) -> str | None:
        if self._devices and self._simulated:
            return simulated_reason(len(self._devices), None)
        return self._reason


def simulated_reason(count: int, source_text: str | None) -> str:
    """One line: why cells cannot run on simulated GPUs."""
    setting = f" (GPU_MAGICS_SOURCE={source_text})" if source_text else ""
    return f"the {count} GPU(s) here are simulated{setting}: GPU backends need real GPUs"


@functools.cache
def _cupy_reason() -> str | None:
    try:
        import cupy  # noqa: F401
    except ImportError:
        return f"CuPy is not installed ({CUPY_INSTALL})"
    except Exception as error:  # a broken CUDA install can fail at import
        dropped("importing CuPy", error)
        return f"CuPy failed to load: {_one_line(error)}"
    return None


def _visible_entries(env: str | None) -> list[str] | None:
    if env is None:
        return None
    return [entry.strip() for entry in env.split(",")]


_inventory: GpuInventory | None = None


def inventory() -> GpuInventory:
    """The inventory in use (made on first call from ``$GPU_MAGICS_SOURCE`` and ``$CUDA_VISIBLE_DEVICES``)."""
    global _inventory
    if _inventory is None:
        _inventory = SourceInventory()
    return _inventory


def set_inventory(new: GpuInventory | None) -> GpuInventory | None:
    """Replace the inventory (tests, or ``None`` to read again on next use); returns the previous one."""
    global _inventory
    previous, _inventory = _inventory, new
    return previous


def describe(devices: Sequence[GpuDevice], simulated: bool = False) -> str:
    """``"1x NVIDIA H200"``, ``"4x NVIDIA H200 (simulated)"`` or ``"1x NVIDIA H100, 1x NVIDIA A100"``."""
    counts: dict[str, int] = {}
    for device in devices:
        counts[device.name] = counts.get(device.name, 0) + 1
    text = ", ".join(f"{count}x {name}" for name, count in counts.items())
    return f"{text} (simulated)" if simulated and text else text


def memory_totals() -> tuple[int, ...] | None:
    """Each visible device's memory in bytes, or ``None`` when none is visible or a size is unknown."""
    found = inventory().devices()
    totals = tuple(device.memory_total for device in found if device.memory_total)
    return totals if found and len(totals) == len(found) else None


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


def usable_devices() -> tuple[GpuDevice, ...]:
    """The devices cells can run on: the visible ones when they are real and CuPy loads, else none."""
    current = inventory()
    return current.devices() if current.unavailable_reason() is None else ()
