"""Reading GPUs through NVML: ``NvmlSource`` and ``select_visible`` (``CUDA_VISIBLE_DEVICES`` semantics).

Only this module imports pynvml, and only inside a function: importing it does no NVML work. ``NvmlSource``
initializes NVML lazily, once per process, on its first read. A field the device does not support reads as
``None``; a failure that stops one device (lost, no permission) sets that reading's ``error`` and leaves the
others alone; a failure that stops NVML as a whole (library missing, driver not loaded) is the read's status.
"""

from __future__ import annotations

import contextlib
import enum
import importlib
import os
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from gpu_magics.monitor import reads_paused
from gpu_magics.monitor.deltas import CounterRates, ProcessTime
from gpu_magics.monitor.models import GpuProcess, GpuReading

__all__ = ["FROM_ENV", "NvmlSource", "select_visible"]

KIB = 1024
_ALL_LINKS = 0xFFFFFFFF  # NVML field scope: the sum over all NVLinks
_VALUE_ATTRS = ("dVal", "uiVal", "ulVal", "ullVal", "sllVal", "siVal", "usVal")  # by nvmlValueType_t
# NVML errors that stop a whole device rather than one field
_DEVICE_FATAL = ("NVMLError_GpuIsLost", "NVMLError_ResetRequired", "NVMLError_Uninitialized")
# NVML failures that stop it as a whole, in plain words (NVML's own text adds nothing a user can act on)
_INIT_REASONS = (
    ("NVMLError_LibraryNotFound", "no NVIDIA driver is installed here"),
    ("NVMLError_DriverNotLoaded", "the NVIDIA driver is not loaded"),
    ("NVMLError_NoPermission", "no permission to read the GPUs (NVML refused)"),
    ("NVMLError_LibRmVersionMismatch", "the NVIDIA driver and its library differ in version (a reboot may fix it)"),
)


class _FromEnv(enum.Enum):
    TOKEN = "CUDA_VISIBLE_DEVICES"


FROM_ENV = _FromEnv.TOKEN
"""``NvmlSource(visible_devices=FROM_ENV)``, the default: select devices by ``$CUDA_VISIBLE_DEVICES``."""


@dataclass(frozen=True, eq=False)
class _Device:
    """A readable device: a whole GPU or one MIG instance (compared by identity)."""

    nvml_index: int | None
    handle: Any
    name: str
    uuid: str
    mig_parent: str | None = None
    gpu_instance: int | None = None
    compute_instance: int | None = None
    error: str | None = None  # set when the device could not be opened


@dataclass(frozen=True)
class _Gpu:
    """A physical GPU and its MIG instances (none when MIG is off)."""

    device: _Device
    migs: tuple[_Device, ...] = ()

    @property
    def visible(self) -> tuple[_Device, ...]:
        """What CUDA shows for this GPU: its MIG instances when MIG is on, else the GPU itself."""
        return self.migs or (self.device,)


def select_visible(gpus: Sequence[_Gpu], spec: str | None) -> tuple[list[_Device], str | None]:
    """Apply a ``CUDA_VISIBLE_DEVICES`` value to the GPUs, returning the devices in user order and a note.

    Like CUDA, entries are GPU indices, ``GPU-`` UUIDs or unique prefixes of them, ``MIG-`` UUIDs (or the
    older ``MIG-GPU-<uuid>/<gi>/<ci>``); the first invalid, unknown, ambiguous or repeated entry hides it and
    every later entry. Indices are NVML's (PCI bus order, as with ``CUDA_DEVICE_ORDER=PCI_BUS_ID``).
    """
    if spec is None:
        return [d for g in gpus for d in g.visible], None
    if not spec.strip():
        return [], "CUDA_VISIBLE_DEVICES is empty: no GPU is visible"
    chosen: list[_Device] = []
    for raw in spec.split(","):
        entry = raw.strip()
        found, why = _resolve_entry(gpus, entry)
        if found and any(d is c for d in found for c in chosen):
            found, why = None, "repeats an earlier entry"
        if not found:
            return chosen, f"CUDA_VISIBLE_DEVICES entry {entry!r} {why}; it and later entries are ignored"
        chosen.extend(found)
    return chosen, None


def _resolve_entry(gpus: Sequence[_Gpu], entry: str) -> tuple[tuple[_Device, ...] | None, str]:
    lower = entry.lower()
    if entry.isdigit():
        matches = [g.visible for g in gpus if g.device.nvml_index == int(entry)]
        return (matches[0], "") if matches else (None, "is not the index of a GPU")
    if lower.startswith("mig-gpu-"):
        parent, _, rest = lower[4:].partition("/")
        matches = [
            (m,)
            for g in gpus
            if g.device.uuid.lower() == parent
            for m in g.migs
            if f"{m.gpu_instance}/{m.compute_instance}" == rest
        ]
    elif lower.startswith("gpu-"):
        matches = [g.visible for g in gpus if g.device.uuid.lower().startswith(lower)]
    elif lower.startswith("mig-"):
        matches = [(m,) for g in gpus for m in g.migs if m.uuid.lower().startswith(lower)]
    else:
        return None, "is not an index or a GPU-/MIG- UUID"
    if len(matches) > 1:
        return None, "matches more than one device"
    return (matches[0], "") if matches else (None, "matches no device")


class _State(enum.Enum):
    UNINITIALIZED = "uninitialized"
    READY = "ready"
    FAILED = "failed"


class NvmlSource:
    """Reads devices through NVML: pynvml by default, or any object with its functions and error classes.

    NVML starts on the first read, once per process (again after a fork or ``close()``). If it cannot start,
    every read returns no devices and the reason; the failure is not retried until ``close()``.
    """

    def __init__(self, binding: Any = None, *, visible_devices: str | _FromEnv | None = FROM_ENV) -> None:
        self._binding = binding
        self._visible_spec = visible_devices
        self._lock = threading.Lock()
        self._state = _State.UNINITIALIZED
        self._pid: int | None = None
        self._nv: Any = None
        self._fatal: tuple[type[BaseException], ...] = ()
        self._reason: str | None = None
        self._devices: tuple[_Device, ...] = ()
        self._legacy_temperature: set[str] = set()
        self._nvlink = CounterRates(KIB)  # NVLink's cumulative KiB counters as bytes/s
        self._process_time = ProcessTime()

    def read(self, *, slow: bool) -> tuple[tuple[GpuReading, ...], str | None]:
        try:
            with reads_paused.reading():
                devices, reason = self._ready()
                return tuple(self._read_device(i, d, slow) for i, d in enumerate(devices)), reason
        except reads_paused.Paused:  # this process is parked: no reading until it is resumed
            return tuple(_failed(i, d, reads_paused.PARKED) for i, d in enumerate(self._devices)), self._reason

    def _ready(self) -> tuple[tuple[_Device, ...], str | None]:
        with self._lock:
            if self._state is _State.READY and self._pid != os.getpid():
                self._state = _State.UNINITIALIZED  # forked: NVML must start again in this process
            if self._state is _State.UNINITIALIZED:
                self._start()
            return self._devices, self._reason

    def read_processes(self) -> dict[str, tuple[GpuProcess, ...] | None]:
        """Device UUID -> the processes on it and the memory each holds (``None`` where NVML does not say), without
        the other slow fields: a process's own report asks this for its figure."""
        found: dict[str, tuple[GpuProcess, ...] | None] = {}
        try:
            with reads_paused.reading():
                for device in (device for device in self._ready()[0] if device.handle is not None):
                    try:
                        found[device.uuid] = self._processes(device.handle)
                    except self._nv.NVMLError:  # the device was lost meanwhile: processes unknown
                        found[device.uuid] = None
        except reads_paused.Paused:  # this process is parked: processes unknown until it is resumed
            found = dict.fromkeys((device.uuid for device in self._devices), None)
        return found

    def close(self) -> None:
        with self._lock:
            if self._state is _State.READY and self._pid == os.getpid():
                with contextlib.suppress(self._nv.NVMLError):
                    self._nv.nvmlShutdown()
            self._state, self._pid, self._reason, self._devices = _State.UNINITIALIZED, None, None, ()
            self._nvlink.clear()

    # -- start-up -------------------------------------------------------------------------------------

    def _start(self) -> None:
        nv = self._binding
        if nv is None:
            try:
                nv = importlib.import_module("pynvml")
            except ImportError as exc:
                self._fail(f"pynvml is not installed (pip install nvidia-ml-py): {exc}")
                return
        try:
            nv.nvmlInit()
        except (nv.NVMLError, OSError) as exc:  # the monitor says why NVML did not start
            self._fail(_init_reason(nv, exc))
            return
        self._nv = nv
        self._fatal = tuple(cls for name in _DEVICE_FATAL if isinstance(cls := getattr(nv, name, None), type))
        try:
            gpus = [self._discover(i) for i in range(nv.nvmlDeviceGetCount())]
        except nv.NVMLError as exc:  # the monitor says why the GPUs could not be listed
            self._fail(f"listing GPUs failed: {_describe(exc)}")
            with contextlib.suppress(nv.NVMLError):
                nv.nvmlShutdown()
            return
        spec = self._visible_spec
        if spec is FROM_ENV:
            spec = os.environ.get("CUDA_VISIBLE_DEVICES")
        devices, note = select_visible(gpus, spec if isinstance(spec, str) else None)
        self._devices = tuple(devices)
        self._reason = "no NVIDIA GPU found" if not gpus else note
        self._state, self._pid = _State.READY, os.getpid()

    def _fail(self, reason: str) -> None:
        self._state, self._reason, self._devices = _State.FAILED, reason, ()

    def _discover(self, index: int) -> _Gpu:
        name, uuid = "unknown GPU", ""
        try:
            handle = self._nv.nvmlDeviceGetHandleByIndex(index)
            name = _text(self._call("nvmlDeviceGetName", handle)) or name
            uuid = _text(self._call("nvmlDeviceGetUUID", handle)) or uuid
            gpu = _Device(index, handle, name, uuid)
            return _Gpu(gpu, self._discover_migs(gpu))
        except self._nv.NVMLError as exc:  # this GPU cannot be opened; the others still can
            return _Gpu(_Device(index, None, name, uuid, error=_describe(exc)))

    def _discover_migs(self, gpu: _Device) -> tuple[_Device, ...]:
        mode = self._call("nvmlDeviceGetMigMode", gpu.handle)
        if not mode or mode[0] != getattr(self._nv, "NVML_DEVICE_MIG_ENABLE", 1):
            return ()
        migs = []
        for k in range(self._call("nvmlDeviceGetMaxMigDeviceCount", gpu.handle) or 0):
            handle = self._call("nvmlDeviceGetMigDeviceHandleByIndex", gpu.handle, k)
            if handle is None:
                continue  # no MIG instance in this slot
            migs.append(
                _Device(
                    gpu.nvml_index,
                    handle,
                    _text(self._call("nvmlDeviceGetName", handle)) or f"{gpu.name} MIG",
                    _text(self._call("nvmlDeviceGetUUID", handle)) or "",
                    mig_parent=gpu.uuid,
                    gpu_instance=self._call("nvmlDeviceGetGpuInstanceId", handle),
                    compute_instance=self._call("nvmlDeviceGetComputeInstanceId", handle),
                )
            )
        return tuple(migs)

    # -- reading --------------------------------------------------------------------------------------

    def _call(self, function: str, *args: Any) -> Any:
        """One NVML query: its value, or None when unsupported or failing; device-fatal errors propagate."""
        fn = getattr(self._nv, function, None)
        if fn is None:
            return None
        try:
            return fn(*args)
        except self._fatal:
            raise
        except Exception:  # expected where a GPU lacks it; any failure, a binding bug included (tested): None
            return None

    def _read_device(self, index: int, device: _Device, slow: bool) -> GpuReading:
        if device.handle is None:
            return _failed(index, device, device.error or "device could not be opened")
        try:
            return self._read_fields(index, device, slow)
        except self._nv.NVMLError as exc:  # lost, reset or uninitialized: the GPU's row says why
            return _failed(index, device, _describe(exc))

    def _read_fields(self, index: int, device: _Device, slow: bool) -> GpuReading:
        nv, handle = self._nv, device.handle
        memory = self._call("nvmlDeviceGetMemoryInfo", handle)
        util = self._call("nvmlDeviceGetUtilizationRates", handle)
        pcie_rx = pcie_tx = nvlink_rx = nvlink_tx = None
        processes = None
        if slow:
            rx_counter, tx_counter = nv.NVML_PCIE_UTIL_RX_BYTES, nv.NVML_PCIE_UTIL_TX_BYTES
            pcie_rx = _scaled(self._call("nvmlDeviceGetPcieThroughput", handle, rx_counter), KIB)
            pcie_tx = _scaled(self._call("nvmlDeviceGetPcieThroughput", handle, tx_counter), KIB)
            nvlink_rx, nvlink_tx = self._nvlink_rates(device)
            processes = self._processes(handle, device.uuid)
        return GpuReading(
            index=index,
            nvml_index=device.nvml_index,
            name=device.name,
            uuid=device.uuid,
            memory_total=_int(getattr(memory, "total", None)),
            memory_used=_int(getattr(memory, "used", None)),
            gpu_util=_scaled(getattr(util, "gpu", None), 1),
            memory_util=_scaled(getattr(util, "memory", None), 1),
            temperature=self._temperature(device),
            power=_scaled(self._call("nvmlDeviceGetPowerUsage", handle), 1e-3),
            power_limit=_scaled(self._call("nvmlDeviceGetEnforcedPowerLimit", handle), 1e-3),
            sm_clock=_int(self._call("nvmlDeviceGetClockInfo", handle, nv.NVML_CLOCK_SM)),
            pcie_rx=pcie_rx,
            pcie_tx=pcie_tx,
            nvlink_rx=nvlink_rx,
            nvlink_tx=nvlink_tx,
            processes=processes,
            mig_parent=device.mig_parent,
        )

    def _temperature(self, device: _Device) -> float | None:
        sensor = self._nv.NVML_TEMPERATURE_GPU
        if device.uuid not in self._legacy_temperature:
            value = self._call("nvmlDeviceGetTemperatureV", device.handle, sensor)
            if value is not None:
                return float(value)
            self._legacy_temperature.add(device.uuid)  # older driver or binding: use the older call
        return _scaled(self._call("nvmlDeviceGetTemperature", device.handle, sensor), 1)

    def _processes(self, handle: Any, uuid: str | None = None) -> tuple[GpuProcess, ...] | None:
        """The processes on a device; with its ``uuid`` (the slow read), each one's share of its time too."""
        found: dict[int, GpuProcess] = {}
        answered = False
        for function in ("nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetGraphicsRunningProcesses"):
            items = self._call(function, handle)
            if items is None:
                continue
            answered = True
            for item in items:
                pid = int(item.pid)
                if found.get(pid) is None or found[pid].used_memory is None:
                    found[pid] = GpuProcess(pid, _int(getattr(item, "usedGpuMemory", None)))
        if not answered:
            return None
        busy = None if uuid is None else self._process_time.read(self._nv, handle, uuid, self._fatal)
        if busy is not None:  # measured: a process without a sample ran nothing lately
            found = {pid: replace(process, sm_util=busy.get(pid, 0.0)) for pid, process in found.items()}
        return tuple(found[pid] for pid in sorted(found))

    def _nvlink_rates(self, device: _Device) -> tuple[float | None, float | None]:
        """NVLink bytes/s over all links, from NVML's cumulative KiB counters (None on the first read)."""
        nv = self._nv
        ids = [
            nv.NVML_FI_DEV_NVLINK_LINK_COUNT,
            (nv.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX, _ALL_LINKS),
            (nv.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, _ALL_LINKS),
        ]
        values = self._call("nvmlDeviceGetFieldValues", device.handle, ids)
        if values is None:
            return None, None
        links, rx, tx = (_field_value(v) for v in values)
        if not links or rx is None or tx is None:
            return None, None
        stamp = values[1].timestamp / 1e6 if values[1].timestamp else time.time()
        return self._nvlink.rates(device.uuid, stamp, int(rx), int(tx))


def _init_reason(nv: Any, exc: Exception) -> str:
    for name, label in _INIT_REASONS:
        cls = getattr(nv, name, None)
        if isinstance(cls, type) and isinstance(exc, cls):
            return label
    return f"NVML initialization failed: {_describe(exc)}"


def _describe(exc: BaseException) -> str:
    text = str(exc)
    if type(exc).__name__.startswith("NVMLError"):
        return text or type(exc).__name__
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _failed(index: int, device: _Device, error: str) -> GpuReading:
    return GpuReading(
        index=index,
        nvml_index=device.nvml_index,
        name=device.name,
        uuid=device.uuid,
        memory_total=None,
        memory_used=None,
        gpu_util=None,
        memory_util=None,
        temperature=None,
        power=None,
        power_limit=None,
        sm_clock=None,
        pcie_rx=None,
        pcie_tx=None,
        nvlink_rx=None,
        nvlink_tx=None,
        processes=None,
        mig_parent=device.mig_parent,
        error=error,
    )


def _field_value(value: Any) -> float | int | None:
    if value.nvmlReturn != 0:
        return None
    kind = int(value.valueType)
    return getattr(value.value, _VALUE_ATTRS[kind], None) if 0 <= kind < len(_VALUE_ATTRS) else None


def _text(value: Any) -> str | None:
    if isinstance(value, bytes):
        return value.decode(errors="replace")
    return value if isinstance(value, str) else None


def _int(value: Any) -> int | None:
    return None if value is None else int(value)


def _scaled(value: Any, factor: float) -> float | None:
    return None if value is None else float(value) * factor
