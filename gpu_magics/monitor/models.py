"""What the monitor reads: plain frozen records of GPUs, the host and moments, and the ``GpuSource`` protocol.

No I/O here: sources (``nvml``, ``fake``) produce these, the sampler keeps them, the views and the server show
them. ``to_json()`` is the shape the server sends (``labextension/src/types.ts`` mirrors it; a test checks).
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any, Protocol

__all__ = ["GpuProcess", "GpuReading", "GpuSource", "HostReading", "Snapshot", "process_lists"]


@dataclass(frozen=True)
class GpuProcess:
    """A process holding memory on a GPU."""

    pid: int
    used_memory: int | None  # bytes
    sm_util: float | None = None  # percent of the GPU's time its kernels ran, lately (None: not measured)

    def to_json(self) -> dict[str, Any]:
        return {"pid": self.pid, "used_memory": self.used_memory, "sm_util": self.sm_util}


@dataclass(frozen=True)
class GpuReading:
    """One device (a whole GPU or a MIG instance) at one moment; ``None`` where a value is unavailable."""

    index: int  # index as the user sees it (after CUDA_VISIBLE_DEVICES)
    nvml_index: int | None
    name: str
    uuid: str
    memory_total: int | None  # bytes
    memory_used: int | None  # bytes
    gpu_util: float | None  # percent
    memory_util: float | None  # percent
    temperature: float | None  # Celsius
    power: float | None  # watts
    power_limit: float | None  # watts
    sm_clock: int | None  # MHz
    pcie_rx: float | None  # bytes/s
    pcie_tx: float | None  # bytes/s
    nvlink_rx: float | None  # bytes/s
    nvlink_tx: float | None  # bytes/s
    processes: tuple[GpuProcess, ...] | None
    mig_parent: str | None = None  # UUID of the GPU a MIG instance belongs to
    error: str | None = None  # why this device could not be read
    host: str | None = None  # the host it was read on, when another process reported it (a cluster worker)

    @property
    def label(self) -> str:
        """How every view names it: ``"GPU 0"`` here, ``"gpu-node-1 · GPU 2"`` on a cluster worker's host
        (numbered as that host's ``nvidia-smi`` does)."""
        if self.host is None:
            return f"GPU {self.index}"
        number = self.nvml_index if self.nvml_index is not None else self.index
        return f"{self.host} · GPU {number}"

    def to_json(self) -> dict[str, Any]:
        data = {f.name: getattr(self, f.name) for f in fields(self)}
        data["processes"] = None if self.processes is None else [p.to_json() for p in self.processes]
        return data


@dataclass(frozen=True)
class HostReading:
    """The host's CPU (percent of all cores) and memory (bytes) at one moment."""

    cpu_percent: float | None
    memory_used: int | None
    memory_total: int | None
    cpu_count: int

    def to_json(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


@dataclass(frozen=True)
class Snapshot:
    """Every device and the host at one moment."""

    time: float  # time.time()
    gpus: tuple[GpuReading, ...]
    host: HostReading
    status: str | None  # None when GPUs were read fine, else why not

    def to_json(self) -> dict[str, Any]:
        return {
            "time": self.time,
            "gpus": [g.to_json() for g in self.gpus],
            "host": self.host.to_json(),
            "status": self.status,
        }


class GpuSource(Protocol):
    """Something that reads all visible devices; it never raises for a device or library problem."""

    def read(self, *, slow: bool) -> tuple[tuple[GpuReading, ...], str | None]:
        """Read every device; ``slow=True`` also reads PCIe, NVLink and processes (tens of ms per GPU)."""
        ...

    def close(self) -> None:
        """Release the library; a later read starts again."""
        ...


def process_lists(source: GpuSource) -> dict[str, tuple[GpuProcess, ...] | None]:
    """Device UUID -> the processes on it and the memory each holds (``None`` where the source cannot say): through
    the source's own ``read_processes`` where it has one (NVML's lists alone), else from a full slow read (which
    also waits on each GPU's PCIe counters, about 20 ms a GPU; its shares of GPU time are left out, as the lists
    alone have none)."""
    reader = getattr(source, "read_processes", None)
    if reader is not None:
        found: dict[str, tuple[GpuProcess, ...] | None] = reader()
        return found
    readings, _ = source.read(slow=True)
    return {
        reading.uuid: None if reading.processes is None else tuple(replace(p, sm_util=None) for p in reading.processes)
        for reading in readings
    }
