"""A data-driven stand-in for the pynvml module, and ``FakeSource``, an ``NvmlSource`` built on it.

``FakeNvml`` has the pynvml functions the monitor calls and raises errors named like pynvml's
(``NVMLError_NotSupported``, ``NVMLError_GpuIsLost``...), so ``NvmlSource``'s own handling is what runs.

A spec (a dict, or a JSON file holding one) describes the driver and its GPUs, in the units of ``GpuReading``
(bytes, percent, Celsius, watts, MHz, bytes/s); the fake converts to NVML's (mW, KB/s, KiB counters)::

    {"init_error": null,                 # or "LibraryNotFound", "DriverNotLoaded", "NoPermission"...
     "pcie_delay": 0.0,                  # seconds each PCIe throughput call blocks (real NVML: ~0.02)
     "gpus": [{"name": "NVIDIA H200", "uuid": "GPU-...", "memory_total": 150754820096,
               "memory_used": [1e9, 2e9],                        # a list is cycled, one value per tick
               "gpu_util": {"min": 0, "max": 100, "period": 20}, # a smooth wave over ticks
               "temperature": null,                              # null: not supported
               "processes": "!NoPermission",                     # "!Name": the call raises NVMLError_Name
                                                                 # (or [{"pid": "self", "used_memory": 2e9}]:
                                                                 # "self" is the reading process)
               "lost_at_tick": 5,                                # every call raises GpuIsLost from tick 5
               "pools": {"kernel": {"arrays": 1e9, "cached": 1e10, "context": 5e8}},  # see fake_pools
               "handle_error": "NoPermission",                   # opening the GPU raises this
               "mig": [{"name": "... MIG 1g.18gb", "uuid": "MIG-...", "memory_total": ...}]}]}

Ticks advance with ``advance()``, or with time when ``tick_seconds`` is given.
"""

from __future__ import annotations

import math
import os
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

from gpu_magics.monitor.fake_pools import device_memory
from gpu_magics.monitor.fake_spec import GIB, demo_spec, fake_uuid, load_spec
from gpu_magics.monitor.nvml import NvmlSource

__all__ = ["ERRORS", "FakeNvml", "FakeSource", "NVMLError", "demo_spec", "load_spec"]


class NVMLError(Exception):
    """Base of the fake's errors; ``value`` is the NVML return code, as in pynvml."""

    value = 999
    message = "Unknown Error"

    def __str__(self) -> str:
        return self.message


def _error_class(name: str, value: int, message: str) -> type[NVMLError]:
    return type(f"NVMLError_{name}", (NVMLError,), {"value": value, "message": message})


ERRORS: dict[str, type[NVMLError]] = {
    name: _error_class(name, value, message)
    for name, value, message in [
        ("Uninitialized", 1, "Uninitialized"),
        ("InvalidArgument", 2, "Invalid Argument"),
        ("NotSupported", 3, "Not Supported"),
        ("NoPermission", 4, "Insufficient Permissions"),
        ("NotFound", 6, "Not Found"),
        ("DriverNotLoaded", 9, "Driver Not Loaded"),
        ("Timeout", 10, "Timeout"),
        ("LibraryNotFound", 12, "NVML Shared Library Not Found"),
        ("FunctionNotFound", 13, "Function Not Found"),
        ("GpuIsLost", 15, "GPU is lost"),
        ("ResetRequired", 16, "GPU requires restart"),
        ("LibRmVersionMismatch", 18, "RM has detected an NVML/RM version mismatch."),
        ("Unknown", 999, "Unknown Error"),
    ]
}
"""The fake's error classes by short name: ``ERRORS["GpuIsLost"]`` is ``FakeNvml.NVMLError_GpuIsLost``."""

_DEFAULTS: dict[str, Any] = {
    "name": "Fake GPU",
    "memory_total": 80 * GIB,
    "memory_used": GIB,
    "gpu_util": 0.0,
    "memory_util": 0.0,
    "temperature": 35.0,
    "power": 75.0,
    "power_limit": 700.0,
    "sm_clock": 1980,
    "pcie_rx": 0.0,
    "pcie_tx": 0.0,
    "nvlink_rx": None,
    "nvlink_tx": None,
    "processes": [],
    "graphics_processes": [],
}
_MIG_UNSUPPORTED = ("gpu_util", "memory_util", "temperature", "power", "power_limit", "sm_clock", "pcie_rx", "pcie_tx")
_MIG_DEFAULTS: dict[str, Any] = {
    **_DEFAULTS,
    "name": "Fake GPU MIG",
    "memory_total": 10 * GIB,
    **dict.fromkeys(_MIG_UNSUPPORTED),  # a MIG instance reports none of these
}


@dataclass(frozen=True)
class _Handle:
    gpu: int
    mig: int | None = None


class FakeNvml:
    """Stands in for the pynvml module: same function names, same error class names, data from a spec.

    ``calls`` counts calls by function name; ``hooks[name]`` runs before that function (to block or record).
    """

    NVMLError = NVMLError
    NVML_SUCCESS = 0
    NVML_ERROR_NOT_SUPPORTED = 3
    NVML_ERROR_NOT_FOUND = 6
    NVML_TEMPERATURE_GPU = 0
    NVML_CLOCK_SM = 1
    NVML_PCIE_UTIL_TX_BYTES = 0
    NVML_PCIE_UTIL_RX_BYTES = 1
    NVML_DEVICE_MIG_DISABLE = 0
    NVML_DEVICE_MIG_ENABLE = 1
    NVML_FI_DEV_NVLINK_LINK_COUNT = 91
    NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX = 138
    NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX = 139
    NVML_VALUE_TYPE_UNSIGNED_INT = 1
    NVML_VALUE_TYPE_UNSIGNED_LONG_LONG = 3

    def __init__(
        self,
        spec: str | os.PathLike[str] | Mapping[str, Any] | None = None,
        *,
        gpus: int | None = None,
        tick_seconds: float | None = None,
    ) -> None:
        self.spec = load_spec(spec, gpus=gpus)
        self.tick_seconds = tick_seconds
        self.calls: Counter[str] = Counter()
        self.hooks: dict[str, Callable[[], None]] = {}
        self.initialized = 0  # nvmlInit calls not yet matched by nvmlShutdown
        self._ticks = 0
        self._start = time.monotonic()
        self._epoch = time.time()
        self._lock = threading.Lock()
        self.memory = device_memory()  # the simulated pools that processes hold (``monitor.fake_pools``)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("NVMLError_") and name[10:] in ERRORS:
            return ERRORS[name[10:]]
        raise AttributeError(name)

    # -- ticks ----------------------------------------------------------------------------------------

    @property
    def tick(self) -> int:
        """The current tick: advanced by ``advance()``, or by time when ``tick_seconds`` is set: then counted from
        the epoch, so every process simulating the same GPUs (the server, a kernel, its workers) reads the same
        figures at the same moment, as processes reading one real GPU do."""
        if self.tick_seconds is None:
            return self._ticks
        return int(time.time() / self.tick_seconds)

    @property
    def age(self) -> int:
        """Ticks since this fake began (``lost_at_tick`` counts these)."""
        if self.tick_seconds is None:
            return self._ticks
        return int((time.monotonic() - self._start) / self.tick_seconds)

    def advance(self, ticks: int = 1) -> None:
        """Move to a later tick (only when ticks are not driven by time)."""
        self._ticks += ticks

    def _seconds(self) -> float:
        """Seconds on the fake's clock: real when time-driven, else one second per tick."""
        if self.tick_seconds is None:
            return float(self._ticks)
        return time.monotonic() - self._start

    # -- spec access ----------------------------------------------------------------------------------

    def _enter(self, function: str) -> None:
        with self._lock:
            self.calls[function] += 1
        hook = self.hooks.get(function)
        if hook is not None:
            hook()
        if function != "nvmlInit" and self.initialized <= 0:
            raise ERRORS["Uninitialized"]()

    def _entry(self, handle: _Handle) -> tuple[dict[str, Any], dict[str, Any]]:
        """The spec of a handle's device and its defaults; raises GpuIsLost once its GPU is lost."""
        gpu = self.spec["gpus"][handle.gpu]
        lost_at = gpu.get("lost_at_tick")
        if lost_at is not None and self.age >= lost_at:
            raise ERRORS["GpuIsLost"]()
        if handle.mig is None:
            return gpu, _DEFAULTS
        return gpu["mig"][handle.mig], _MIG_DEFAULTS

    def _value(self, handle: _Handle, key: str, tick: int | None = None) -> Any:
        entry, defaults = self._entry(handle)
        return _evaluate(entry.get(key, defaults.get(key)), self.tick if tick is None else tick)

    # -- the pynvml functions -------------------------------------------------------------------------

    def nvmlInit(self) -> None:
        self._enter("nvmlInit")
        error = self.spec.get("init_error")
        if error:
            raise ERRORS[error]()
        self.initialized += 1

    def nvmlShutdown(self) -> None:
        self._enter("nvmlShutdown")
        self.initialized -= 1

    def nvmlDeviceGetCount(self) -> int:
        self._enter("nvmlDeviceGetCount")
        return len(self.spec["gpus"])

    def nvmlDeviceGetHandleByIndex(self, index: int) -> _Handle:
        self._enter("nvmlDeviceGetHandleByIndex")
        if not 0 <= index < len(self.spec["gpus"]):
            raise ERRORS["InvalidArgument"]()
        error = self.spec["gpus"][index].get("handle_error")
        if error:
            raise ERRORS[error]()
        self._entry(_Handle(index))
        return _Handle(index)

    def nvmlDeviceGetName(self, handle: _Handle) -> str:
        self._enter("nvmlDeviceGetName")
        return str(self._value(handle, "name"))

    def nvmlDeviceGetUUID(self, handle: _Handle) -> str:
        self._enter("nvmlDeviceGetUUID")
        return self._uuid(handle)

    def _uuid(self, handle: _Handle) -> str:
        uuid = self._entry(handle)[0].get("uuid")
        return str(uuid or ("GPU-" if handle.mig is None else "MIG-") + fake_uuid(f"{handle.gpu}/{handle.mig}"))

    def nvmlDeviceGetMemoryInfo(self, handle: _Handle) -> SimpleNamespace:
        self._enter("nvmlDeviceGetMemoryInfo")
        total, used = round(self._value(handle, "memory_total")), round(self._value(handle, "memory_used"))
        used = min(total, used + sum(pool.total for pool in self.memory.on(self._uuid(handle)).values()))
        return SimpleNamespace(total=total, used=used, free=total - used)

    def nvmlDeviceGetUtilizationRates(self, handle: _Handle) -> SimpleNamespace:
        self._enter("nvmlDeviceGetUtilizationRates")
        gpu, memory = self._value(handle, "gpu_util"), self._value(handle, "memory_util")
        return SimpleNamespace(gpu=round(gpu), memory=round(memory))

    def nvmlDeviceGetTemperature(self, handle: _Handle, sensor: int) -> int:
        self._enter("nvmlDeviceGetTemperature")
        return round(self._value(handle, "temperature"))

    def nvmlDeviceGetPowerUsage(self, handle: _Handle) -> int:
        self._enter("nvmlDeviceGetPowerUsage")
        return round(self._value(handle, "power") * 1000)

    def nvmlDeviceGetEnforcedPowerLimit(self, handle: _Handle) -> int:
        self._enter("nvmlDeviceGetEnforcedPowerLimit")
        return round(self._value(handle, "power_limit") * 1000)

    def nvmlDeviceGetClockInfo(self, handle: _Handle, clock: int) -> int:
        self._enter("nvmlDeviceGetClockInfo")
        return round(self._value(handle, "sm_clock"))

    def nvmlDeviceGetPcieThroughput(self, handle: _Handle, counter: int) -> int:
        self._enter("nvmlDeviceGetPcieThroughput")
        key = "pcie_rx" if counter == self.NVML_PCIE_UTIL_RX_BYTES else "pcie_tx"
        value = self._value(handle, key)
        delay = float(self.spec.get("pcie_delay", 0.0))
        if delay > 0:
            time.sleep(delay)
        return int(value / 1024)

    def nvmlDeviceGetFieldValues(self, handle: _Handle, field_ids: list[Any]) -> list[SimpleNamespace]:
        self._enter("nvmlDeviceGetFieldValues")
        entry, defaults = self._entry(handle)
        rates = {key: entry.get(key, defaults.get(key)) for key in ("nvlink_rx", "nvlink_tx")}
        for rate in rates.values():  # "!Name": the whole call fails
            if isinstance(rate, str):
                _evaluate(rate, 0)
        links = entry.get("nvlink_links", 0 if rates["nvlink_rx"] is None else 18)
        stamp = int((self._epoch + self._seconds()) * 1e6)  # microseconds since 1970, as NVML gives
        return [self._field(field, links, rates, stamp) for field in field_ids]

    def _field(self, field: Any, links: int, rates: dict[str, Any], stamp: int) -> SimpleNamespace:
        field_id, scope = field if isinstance(field, tuple) else (field, 0)
        value, kind = None, self.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG
        if field_id == self.NVML_FI_DEV_NVLINK_LINK_COUNT:
            value, kind = links, self.NVML_VALUE_TYPE_UNSIGNED_INT
        elif field_id == self.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX and rates["nvlink_rx"] is not None:
            value = self._kib_counter(rates["nvlink_rx"])
        elif field_id == self.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX and rates["nvlink_tx"] is not None:
            value = self._kib_counter(rates["nvlink_tx"])
        status = self.NVML_SUCCESS if value is not None else self.NVML_ERROR_NOT_SUPPORTED
        number = 0 if value is None else int(value)
        return SimpleNamespace(
            fieldId=field_id,
            scopeId=scope,
            timestamp=stamp,
            latencyUsec=0,
            valueType=kind,
            nvmlReturn=status,
            value=SimpleNamespace(uiVal=number, ullVal=number),
        )

    def _kib_counter(self, rate: Any) -> int:
        """A cumulative KiB counter that grows at ``rate`` bytes/s (rate constant within each tick)."""
        seconds, age, base = self._seconds(), self.age, self.tick - self.age  # counted from this fake's start
        length = 1.0 if self.tick_seconds is None else self.tick_seconds
        done = sum(_evaluate(rate, base + k) or 0 for k in range(age)) * length
        return int((done + (_evaluate(rate, base + age) or 0) * (seconds - age * length)) / 1024)

    def nvmlDeviceGetComputeRunningProcesses(self, handle: _Handle) -> list[SimpleNamespace]:
        self._enter("nvmlDeviceGetComputeRunningProcesses")
        return self._process_list(handle, "processes")

    def nvmlDeviceGetProcessUtilization(self, handle: _Handle, last_seen: int) -> list[SimpleNamespace]:
        """A sample now of each process whose spec gives ``sm_util``; NotFound where none does (nobody ran); a MIG
        slice, or a GPU whose ``process_util`` spec is ``"!NotSupported"`` (a vGPU), refuses."""
        self._enter("nvmlDeviceGetProcessUtilization")
        refusal = "!NotSupported" if handle.mig is not None else self._entry(handle)[0].get("process_util")
        if isinstance(refusal, str) and refusal.startswith("!"):
            raise ERRORS[refusal[1:]]()
        stamp, tick = max(int(self._seconds() * 1e6), last_seen + 1), self.tick
        busy = [(p["pid"], _optional(p.get("sm_util"), tick)) for p in self._value(handle, "processes", tick)]
        samples = [SimpleNamespace(pid=os.getpid() if pid == "self" else int(pid), timeStamp=stamp, smUtil=util)
                   for pid, util in busy if util is not None]  # fmt: skip
        if not samples:
            raise ERRORS["NotFound"]()
        return samples

    def nvmlDeviceGetGraphicsRunningProcesses(self, handle: _Handle) -> list[SimpleNamespace]:
        self._enter("nvmlDeviceGetGraphicsRunningProcesses")
        return self._process_list(handle, "graphics_processes")

    def _process_list(self, handle: _Handle, key: str) -> list[SimpleNamespace]:
        tick = self.tick
        pools = self.memory.on(self._uuid(handle)) if key == "processes" else {}  # the simulated pools' processes
        return [
            SimpleNamespace(
                pid=os.getpid() if p["pid"] == "self" else int(p["pid"]),
                usedGpuMemory=_optional(p.get("used_memory"), tick),
            )
            for p in self._value(handle, key, tick)
        ] + [SimpleNamespace(pid=pid, usedGpuMemory=pool.total) for pid, pool in pools.items()]

    def nvmlDeviceGetMigMode(self, handle: _Handle) -> list[int]:
        self._enter("nvmlDeviceGetMigMode")
        enabled = handle.mig is None and bool(self._entry(handle)[0].get("mig"))
        return [int(enabled), int(enabled)]

    def nvmlDeviceGetMaxMigDeviceCount(self, handle: _Handle) -> int:
        self._enter("nvmlDeviceGetMaxMigDeviceCount")
        migs = self._entry(handle)[0].get("mig") or []
        return max(7, len(migs)) if migs else 0

    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle: _Handle, index: int) -> _Handle:
        self._enter("nvmlDeviceGetMigDeviceHandleByIndex")
        migs = self._entry(handle)[0].get("mig") or []
        if index >= len(migs) or migs[index] is None:
            raise ERRORS["NotFound"]()
        return _Handle(handle.gpu, index)

    def nvmlDeviceGetGpuInstanceId(self, handle: _Handle) -> int:
        self._enter("nvmlDeviceGetGpuInstanceId")
        return int(self._entry(handle)[0].get("gpu_instance", (handle.mig or 0) + 1))

    def nvmlDeviceGetComputeInstanceId(self, handle: _Handle) -> int:
        self._enter("nvmlDeviceGetComputeInstanceId")
        return int(self._entry(handle)[0].get("compute_instance", 0))


def _evaluate(value: Any, tick: int) -> Any:
    """A spec value at a tick: constants, cycled lists, waves; ``None`` and ``"!Name"`` raise."""
    if isinstance(value, list) and value and not isinstance(value[0], dict):
        value = value[tick % len(value)]
    if isinstance(value, dict) and "period" in value:
        low, high = float(value.get("min", 0)), float(value.get("max", 100))
        phase = (tick + float(value.get("phase", 0))) / float(value["period"])
        value = low + (high - low) * (1 - math.cos(2 * math.pi * phase)) / 2
    if value is None:
        raise ERRORS["NotSupported"]()
    if isinstance(value, str) and value.startswith("!"):
        raise ERRORS[value[1:]]()
    return value


def _optional(value: Any, tick: int) -> int | None:
    return None if value is None else round(_evaluate(value, tick))


class FakeSource(NvmlSource):
    """An ``NvmlSource`` over a ``FakeNvml``: ``FakeSource(gpus=8)`` or ``FakeSource(spec="gpus.json")``.

    Ticks follow time (``tick_seconds``, 0.5 s by default; ``None`` to advance by hand through ``nvml``).
    ``visible_devices`` works like ``CUDA_VISIBLE_DEVICES``, which the fake does not read.
    """

    def __init__(
        self,
        spec: str | os.PathLike[str] | Mapping[str, Any] | None = None,
        *,
        gpus: int | None = None,
        tick_seconds: float | None = 0.5,
        visible_devices: str | None = None,
    ) -> None:
        self.nvml = FakeNvml(spec, gpus=gpus, tick_seconds=tick_seconds)
        super().__init__(self.nvml, visible_devices=visible_devices)
