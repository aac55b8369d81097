"""Host CPU and memory through psutil, without psutil's shared ``cpu_percent`` state."""

from __future__ import annotations

import os
import threading

import psutil

from gpu_magics.monitor.models import HostReading

__all__ = ["HostProbe"]


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
