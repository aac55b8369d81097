"""What a cluster worker reports about its own GPUs: the telemetry message, as plain frozen data (no I/O).

Workers build ``WorkerReport``s (``telemetry.plugin``) and send them with distributed's events
(``Worker.log_event`` on ``TOPIC``); the kernel turns them back (``WorkerReport.from_message``) and names
their GPUs (``host_labels``). Messages are msgpack-ready dicts with a version, so a kernel can ignore what a
newer or older worker sends instead of failing on it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields
from typing import Any

from gpu_magics.cluster.telemetry.pools import ProcessMemory
from gpu_magics.monitor.models import GpuReading

TOPIC = "gpu-magics-telemetry"
VERSION = 1  # new fields with defaults keep it: an older kernel ignores them
LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})


@dataclass(frozen=True)
class ReportedGpu:
    """One GPU as a worker sees it, plus what the worker process itself holds on it."""

    index: int  # within the worker's CUDA_VISIBLE_DEVICES: 0 is the device its tasks use
    nvml_index: int | None  # as the host's nvidia-smi numbers it
    uuid: str
    name: str
    memory_total: int | None = None
    memory_used: int | None = None
    gpu_util: float | None = None
    memory_util: float | None = None
    temperature: float | None = None
    power: float | None = None
    power_limit: float | None = None
    process_memory: int | None = None  # bytes held by the reporting process, all of it
    process_memory_source: str | None = None  # "rmm", "cupy", "fake" or "nvml"
    error: str | None = None
    array_memory: int | None = None  # of process_memory: in use by arrays
    cached_memory: int | None = None  # cached by its pool, free to give back
    context_memory: int | None = None  # its CUDA context and libraries
    gpu_processes: tuple[tuple[int, int | None], ...] | None = None  # NVML's (pid, bytes) on this GPU

    @classmethod
    def from_reading(cls, reading: GpuReading, held: ProcessMemory | None = None) -> ReportedGpu:
        held = held or ProcessMemory()
        shared = {name: getattr(reading, name) for name in _SHARED_FIELDS}
        processes = None
        if reading.processes is not None:
            processes = tuple((process.pid, process.used_memory) for process in reading.processes)
        return cls(
            **shared,
            process_memory=held.total,
            process_memory_source=held.source if held.total is not None else None,
            array_memory=held.arrays,
            cached_memory=held.cached,
            context_memory=held.context,
            gpu_processes=processes,
        )

    def reading(self, *, index: int, host: str | None) -> GpuReading:
        """As a monitor reading: ``index`` is its key in the kernel's view, ``host`` its host label (``None``
        when the kernel sees this GPU itself, as GPU ``index``); what workers do not report is ``None``."""
        shared = {name: getattr(self, name) for name in _SHARED_FIELDS}
        return GpuReading(**{**_UNREPORTED, **shared, "index": index, "host": host})


_GPU_FIELD_NAMES = tuple(f.name for f in fields(ReportedGpu))
_SHARED_FIELDS = tuple(f.name for f in fields(GpuReading) if f.name in _GPU_FIELD_NAMES)  # read from the GPU
_UNREPORTED = {f.name: None for f in fields(GpuReading) if f.name not in _GPU_FIELD_NAMES}  # PCIe, processes...
_GPU_FIELDS = frozenset(_GPU_FIELD_NAMES)


@dataclass(frozen=True)
class WorkerReport:
    """One worker's GPUs at one moment (or, with ``gone``, that it is leaving)."""

    worker: str  # the worker's address
    name: str
    host: str  # the host part of its address
    hostname: str
    pid: int
    time: float  # seconds since the epoch, on the worker
    interval: float  # seconds until its next report
    gpus: tuple[ReportedGpu, ...] = ()
    status: str | None = None  # why its GPUs could not be read at all (no driver, no GPU)
    gone: bool = False

    def to_message(self) -> dict[str, Any]:
        """A msgpack-ready dict (shallow copies: ``asdict``'s deep copy cost more than reading the GPUs)."""
        data = {name: getattr(self, name) for name in _REPORT_FIELDS}
        data["gpus"] = [{name: getattr(gpu, name) for name in _GPU_FIELD_NAMES} for gpu in self.gpus]
        for gpu in data["gpus"]:
            if gpu["gpu_processes"] is not None:
                gpu["gpu_processes"] = [list(pair) for pair in gpu["gpu_processes"]]
        data["v"] = VERSION
        return data

    @classmethod
    def from_message(cls, message: Mapping[str, Any]) -> WorkerReport:
        """The inverse of ``to_message``; ``ValueError`` for anything else (another version, missing fields)."""
        try:
            if message.get("v") != VERSION:
                raise ValueError(f"telemetry version {message.get('v')!r}, expected {VERSION}")
            gpus = tuple(_reported_gpu(gpu) for gpu in message.get("gpus") or ())
            return cls(
                worker=str(message["worker"]),
                name=str(message["name"]),
                host=str(message["host"]),
                hostname=str(message.get("hostname") or message["host"]),
                pid=int(message["pid"]),
                time=float(message["time"]),
                interval=float(message["interval"]),
                gpus=gpus,
                status=None if message.get("status") is None else str(message["status"]),
                gone=bool(message.get("gone", False)),
            )
        except (KeyError, TypeError, AttributeError) as error:
            raise ValueError(f"not a telemetry message: {error!r}") from None


_REPORT_FIELDS = tuple(f.name for f in fields(WorkerReport))


def _reported_gpu(gpu: Mapping[str, Any]) -> ReportedGpu:
    known = {key: value for key, value in gpu.items() if key in _GPU_FIELDS}
    processes = known.get("gpu_processes")
    if processes is not None:
        known["gpu_processes"] = tuple((int(pid), None if used is None else int(used)) for pid, used in processes)
    return ReportedGpu(**known)


def is_this_host(host: str, hostname: str, local_hostname: str) -> bool:
    """Whether a worker at address host ``host`` on ``hostname`` runs on the kernel's machine: the usual
    loopback address (127.0.0.1, ::1, localhost) and the same hostname. Other loopback addresses
    (127.0.0.2, ...) stand for other hosts, as they do in tests."""
    return host in LOOPBACK_NAMES and hostname == local_hostname


def host_labels(reports: Iterable[WorkerReport]) -> dict[str, str]:
    """Address host -> how views name it: its hostname where no other address host has that hostname, else
    the address itself (several workers on one machine with different addresses, as in tests)."""
    hostnames: dict[str, set[str]] = {}
    by_host: dict[str, str] = {}
    for report in reports:
        by_host[report.host] = report.hostname
        hostnames.setdefault(report.hostname, set()).add(report.host)
    return {host: name if len(hostnames[name]) == 1 else host for host, name in by_host.items()}
