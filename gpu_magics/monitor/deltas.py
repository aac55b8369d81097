"""Readings made from the difference between two reads: the host's CPU percent (CPU-time deltas, through psutil
without its shared ``cpu_percent`` state) and its memory; bytes/s from cumulative counters (NVLink's); each
process's share of a GPU's time from NVML's samples since the last read."""

from __future__ import annotations

import os
import threading
from typing import Any

import psutil

from gpu_magics.monitor.models import HostReading

__all__ = ["CounterRates", "HostProbe", "ProcessTime"]


class HostProbe:
    """Reads system-wide CPU percent (from CPU-time deltas between reads) and memory in use."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._last = _cpu_times()
        self._percent: float | None = None
        self._cpu_count = psutil.cpu_count() or os.cpu_count() or 1

    def read(self) -> HostReading:
        with self._lock:
            now = _cpu_times()
            if now is not None and self._last is not None and now[1] > self._last[1]:
                busy = (now[0] - self._last[0]) / (now[1] - self._last[1])
                self._percent = min(100.0, max(0.0, 100.0 * busy))
                self._last = now
            elif self._last is None:
                self._last = now
            percent = self._percent
        used: int | None = None
        total: int | None = None
        try:
            memory = psutil.virtual_memory()
            used, total = int(memory.total - memory.available), int(memory.total)
        except (OSError, RuntimeError):  # psutil could not read the figures: none shown
            pass
        return HostReading(cpu_percent=percent, memory_used=used, memory_total=total, cpu_count=self._cpu_count)


def _cpu_times() -> tuple[float, float] | None:
    """(busy, total) CPU seconds over all cores since boot; guest time is already inside user time."""
    try:
        times = psutil.cpu_times()
    except (OSError, RuntimeError):  # psutil could not read the figures: none shown
        return None
    total = sum(times) - getattr(times, "guest", 0.0) - getattr(times, "guest_nice", 0.0)
    idle = times.idle + getattr(times, "iowait", 0.0)
    return total - idle, total


class CounterRates:
    """Bytes/s per device from two cumulative counters (received, sent) in ``unit`` bytes; ``None`` on the first
    read, and the last rates again where the counters have not moved on since."""

    def __init__(self, unit: int) -> None:
        self._unit = unit
        self._lock = threading.Lock()
        self._last: dict[str, tuple[float, int, int, float | None, float | None]] = {}  # uuid -> stamp, rx, tx, rates

    def clear(self) -> None:
        with self._lock:
            self._last.clear()

    def rates(self, uuid: str, stamp: float, rx: int, tx: int) -> tuple[float | None, float | None]:
        with self._lock:
            previous = self._last.get(uuid)
            if previous is not None and stamp <= previous[0]:
                return previous[3], previous[4]  # no new counter value yet
            found: tuple[float | None, float | None] = (None, None)
            if previous is not None and rx >= previous[1] and tx >= previous[2]:
                elapsed = stamp - previous[0]
                found = ((rx - previous[1]) * self._unit / elapsed, (tx - previous[2]) * self._unit / elapsed)
            self._last[uuid] = (stamp, rx, tx, *found)
            return found


class ProcessTime:
    """Each process's mean share (%) of a GPU's time, from NVML's per-process samples since the last read of it."""

    def __init__(self) -> None:
        self._seen: dict[str, int] = {}  # GPU UUID -> the newest sample read (us)

    def read(self, nv: Any, handle: Any, uuid: str, fatal: type[BaseException] | tuple[type[BaseException], ...]
             ) -> dict[int, float] | None:  # fmt: skip
        """pid -> share; ``{}`` where NVML has no sample (nobody ran), ``None`` where it cannot say (a MIG slice, a
        vGPU, a binding without the call)."""
        since = self._seen.get(uuid, 0)
        try:
            samples = list(nv.nvmlDeviceGetProcessUtilization(handle, since) or ())
        except fatal:
            raise
        except Exception as error:  # NVML_ERROR_NOT_FOUND: no sample since then, so no process ran
            return {} if getattr(error, "value", None) == getattr(nv, "NVML_ERROR_NOT_FOUND", 6) else None
        shares: dict[int, list[float]] = {}
        for sample in samples:
            if int(sample.timeStamp or 0) > since:
                shares.setdefault(int(sample.pid), []).append(float(sample.smUtil))
        self._seen[uuid] = max([since, *(int(sample.timeStamp or 0) for sample in samples)])
        return {pid: min(100.0, sum(values) / len(values)) for pid, values in shares.items()}
