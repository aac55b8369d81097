"""The GPU sampler: background threads filling a bounded ring buffer of ``Snapshot``s; one per process.

Fast fields (memory, utilization, temperature, power, clock) are read every ``interval``. Slow fields (PCIe,
NVLink, processes: NVML blocks ~20 ms per PCIe query) are read by a second thread every ``slow_interval``
(default 5 s); their latest values are merged into the fast snapshots, so a slow read never delays a fast one.
"""

from __future__ import annotations

import atexit
import logging
import math
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, fields, replace
from typing import Any

from gpu_magics.monitor.deltas import HostProbe
from gpu_magics.monitor.models import GpuReading, GpuSource, Snapshot
from gpu_magics.monitor.sources import default_source
from gpu_magics.text.units import dropped

__all__ = [
    "MIN_INTERVAL",
    "GpuSummary",
    "Sampler",
    "get_sampler",
    "shutdown_sampler",
    "summarize",
]

MIN_INTERVAL = 0.1
"""The shortest sampling interval, in seconds (kernel, workers and server alike)."""

_log = logging.getLogger(__name__)
_SLOW_FIELDS = ("pcie_rx", "pcie_tx", "nvlink_rx", "nvlink_tx", "processes")


def _checked_interval(name: str, value: float) -> float:
    if not isinstance(value, int | float) or not math.isfinite(value) or value < MIN_INTERVAL:
        raise ValueError(f"{name} must be a number of seconds >= {MIN_INTERVAL} (got {value!r})")
    return float(value)


class _Run:
    """The threads and events of one ``start()`` .. ``stop()`` span."""

    def __init__(self) -> None:
        self.stop = threading.Event()
        self.fast_wake = threading.Event()
        self.slow_wake = threading.Event()
        self.threads: list[threading.Thread] = []


class Sampler:
    """Samples a ``GpuSource`` and the host into a ring buffer, and tells subscribers of each snapshot.

    Subscribers run on the sampling thread (or the ``tick()`` caller): keep them quick; their exceptions are
    logged and do not stop sampling.
    """

    def __init__(
        self,
        source: GpuSource | None = None,
        *,
        interval: float = 0.5,
        slow_interval: float = 5.0,
        history: int = 1200,
    ) -> None:
        if not isinstance(history, int) or history < 1:
            raise ValueError(f"history must be a positive number of snapshots (got {history!r})")
        self._interval = _checked_interval("interval", interval)
        self._slow_interval = _checked_interval("slow_interval", slow_interval)
        self.source: GpuSource = source if source is not None else default_source()
        self._buffer: deque[Snapshot] = deque(maxlen=history)
        self._lock = threading.Lock()  # buffer, subscribers, slow values
        self._sample_lock = threading.RLock()  # one snapshot at a time, delivered in order
        self._run_lock = threading.Lock()  # start/stop
        self._subscribers: list[Callable[[Snapshot], None]] = []
        self._failed_subscribers: set[int] = set()
        self._slow: dict[str, GpuReading] = {}
        self._slow_at: float | None = None  # time.monotonic() of the last slow read
        self._run: _Run | None = None
        self._host = HostProbe()

    # -- configuration and lifecycle ------------------------------------------------------------------

    @property
    def interval(self) -> float:
        """Seconds between snapshots (at least ``MIN_INTERVAL``); a change applies at once."""
        return self._interval

    @interval.setter
    def interval(self, value: float) -> None:
        self._interval = _checked_interval("interval", value)
        if (run := self._run) is not None:
            run.fast_wake.set()

    @property
    def slow_interval(self) -> float:
        """Seconds between reads of PCIe, NVLink and processes (at least ``MIN_INTERVAL``)."""
        return self._slow_interval

    @slow_interval.setter
    def slow_interval(self, value: float) -> None:
        self._slow_interval = _checked_interval("slow_interval", value)
        if (run := self._run) is not None:
            run.slow_wake.set()

    @property
    def running(self) -> bool:
        run = self._run
        return run is not None and any(t.is_alive() for t in run.threads)

    def start(self) -> None:
        """Start the sampling threads (daemons); does nothing when they are running."""
        with self._run_lock:
            if self.running:
                return
            run = _Run()
            run.threads = [
                threading.Thread(target=self._fast_loop, args=(run,), name="gpu-magics-sampler", daemon=True),
                threading.Thread(target=self._slow_loop, args=(run,), name="gpu-magics-sampler-slow", daemon=True),
            ]
            self._run = run
            for thread in run.threads:
                thread.start()

    def stop(self, timeout: float = 2.0) -> None:
        """Stop the threads and wait up to ``timeout`` seconds for them to end (a read under way finishes)."""
        with self._run_lock:
            run, self._run = self._run, None
        if run is None:
            return
        run.stop.set()
        run.fast_wake.set()
        run.slow_wake.set()
        deadline = time.monotonic() + timeout
        others = [t for t in run.threads if t is not threading.current_thread()]
        for thread in others:
            thread.join(max(0.0, deadline - time.monotonic()))
        stuck = [t.name for t in others if t.is_alive()]
        if stuck:
            _log.warning("GPU sampler threads still in a read %.1f s after stop(): %s", timeout, stuck)

    def close(self) -> None:
        """Stop sampling and release the source."""
        self.stop()
        self.source.close()

    # -- data -----------------------------------------------------------------------------------------

    def tick(self) -> Snapshot:
        """Take one snapshot now; when the threads are not running it also reads slow fields when due."""
        return self._sample(inline_slow=not self.running)

    def refresh(self) -> Snapshot:
        """Take one snapshot now, its slow fields (processes, PCIe, NVLink) read afresh too where the last slow read
        is older than ``slow_interval`` (after a standby: no reading of then stands for now)."""
        return self._sample(inline_slow=True)

    def latest(self) -> Snapshot | None:
        with self._lock:
            return self._buffer[-1] if self._buffer else None

    def history(self, since: float | None = None) -> list[Snapshot]:
        """Buffered snapshots, oldest first; with ``since`` (a ``time.time()``), only those taken after it."""
        with self._lock:
            snapshots = list(self._buffer)
        return snapshots if since is None else [s for s in snapshots if s.time > since]

    def subscribe(self, callback: Callable[[Snapshot], None]) -> Callable[[], None]:
        """Call ``callback`` with every new snapshot; returns a function that unsubscribes it."""
        with self._lock:
            self._subscribers.append(callback)

        def unsubscribe() -> None:
            with self._lock:
                if callback in self._subscribers:
                    self._subscribers.remove(callback)

        return unsubscribe

    # -- sampling -------------------------------------------------------------------------------------

    def _fast_loop(self, run: _Run) -> None:
        last: float | None = None  # when the previous snapshot was due
        while not run.stop.is_set():
            now = time.monotonic()
            if last is not None and now < last + self._interval:
                run.fast_wake.wait(last + self._interval - now)
                run.fast_wake.clear()
                continue  # the interval may have changed: compute the due time again
            self._sample(inline_slow=False)
            due = now if last is None else last + self._interval
            last = due if now - due < self._interval else now  # after a long stall, do not catch up

    def _slow_loop(self, run: _Run) -> None:
        # The first slow read waits one slow interval: a short sampling span (a quick cell) then never pays for
        # a blocking PCIe read when it stops, and the fast snapshots start at once.
        started = time.monotonic()
        while True:
            while not run.stop.is_set() and (left := started + self._slow_interval - time.monotonic()) > 0:
                run.slow_wake.wait(left)
                run.slow_wake.clear()
            if run.stop.is_set():
                return
            started = time.monotonic()
            self._read_slow()

    def _sample(self, *, inline_slow: bool) -> Snapshot:
        with self._sample_lock:
            if inline_slow and self._slow_due():
                readings, status = self._read_slow()
            else:
                readings, status = self._read(slow=False)
                readings = self._merge_slow(readings)
            snapshot = Snapshot(time=time.time(), gpus=readings, host=self._host.read(), status=status)
            with self._lock:
                self._buffer.append(snapshot)
                subscribers = list(self._subscribers)
            for callback in subscribers:
                self._deliver(callback, snapshot)
            return snapshot

    def _read(self, *, slow: bool) -> tuple[tuple[GpuReading, ...], str | None]:
        try:
            return self.source.read(slow=slow)
        except Exception as exc:  # a source should not raise; keep sampling if one does
            dropped("reading the GPUs", exc, once=True)
            return (), f"reading GPUs failed: {type(exc).__name__}: {exc}"

    def _read_slow(self) -> tuple[tuple[GpuReading, ...], str | None]:
        readings, status = self._read(slow=True)
        latest = {_key(r): r for r in readings if r.error is None}
        with self._lock:
            self._slow, self._slow_at = latest, time.monotonic()
        return readings, status

    def _slow_due(self) -> bool:
        with self._lock:
            return self._slow_at is None or time.monotonic() - self._slow_at >= self._slow_interval

    def _merge_slow(self, readings: tuple[GpuReading, ...]) -> tuple[GpuReading, ...]:
        with self._lock:
            slow = self._slow
        if not slow:
            return readings
        return tuple(_with_slow_fields(r, slow.get(_key(r))) for r in readings)

    def _deliver(self, callback: Callable[[Snapshot], None], snapshot: Snapshot) -> None:
        try:
            callback(snapshot)
        except Exception:  # a subscriber never stops the sampling
            if id(callback) in self._failed_subscribers:
                _log.debug("GPU sampler subscriber %r failed again", callback, exc_info=True)
            else:
                self._failed_subscribers.add(id(callback))
                _log.exception("GPU sampler subscriber %r failed (later failures are logged at debug)", callback)


def _key(reading: GpuReading) -> str:
    return reading.uuid or f"#{reading.index}"


def _with_slow_fields(reading: GpuReading, slow: GpuReading | None) -> GpuReading:
    if slow is None or reading.error is not None:
        return reading
    return replace(reading, **{name: getattr(slow, name) for name in _SLOW_FIELDS})


# -- the process-wide sampler -------------------------------------------------------------------------

_shared: Sampler | None = None
_shared_pid: int | None = None
_shared_lock = threading.Lock()
_atexit_registered = False


def get_sampler() -> Sampler:
    """This process's shared sampler (``$GPU_MAGICS_SOURCE`` picks its source); ``start()`` it to sample."""
    global _shared, _shared_pid, _atexit_registered
    with _shared_lock:
        if _shared is None or _shared_pid != os.getpid():  # a forked child gets its own
            _shared, _shared_pid = Sampler(), os.getpid()
            if not _atexit_registered:
                atexit.register(shutdown_sampler)
                _atexit_registered = True
        return _shared


def shutdown_sampler() -> None:
    """Stop and drop the shared sampler, releasing NVML; the next ``get_sampler()`` makes a new one."""
    global _shared
    with _shared_lock:
        sampler, _shared = _shared, None
        owned = _shared_pid == os.getpid()
    if sampler is not None and owned:
        sampler.close()


# -- summaries ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class GpuSummary:
    """One device over a window of snapshots; ``None`` where no snapshot had the value."""

    index: int
    name: str
    uuid: str
    samples: int
    memory_total: int | None
    peak_memory_used: int | None
    mean_gpu_util: float | None
    peak_gpu_util: float | None
    mean_memory_util: float | None
    mean_power: float | None
    peak_power: float | None
    peak_temperature: float | None
    error: str | None  # the last error seen, if any
    label: str = ""  # how views name it: "GPU 0", or "gpu-node-1 · GPU 2" for a cluster worker's GPU
    # PCIe and NVLink throughput, received plus sent (bytes/s; read every few seconds, so coarser than util)
    peak_pcie: float | None = None
    mean_pcie: float | None = None
    peak_nvlink: float | None = None
    mean_nvlink: float | None = None

    def to_json(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


def summarize(snapshots: Iterable[Snapshot]) -> dict[int, GpuSummary]:
    """Peaks and means per device index over ``snapshots`` (e.g. ``sampler.history(since=start)``)."""
    by_index: dict[int, list[GpuReading]] = {}
    for snapshot in snapshots:
        for reading in snapshot.gpus:
            by_index.setdefault(reading.index, []).append(reading)
    return {index: _summary(readings) for index, readings in sorted(by_index.items())}


def _summary(readings: list[GpuReading]) -> GpuSummary:
    last = readings[-1]
    errors = [r.error for r in readings if r.error is not None]
    peak_memory = _peak(r.memory_used for r in readings)
    pcie = [link_throughput(r.pcie_rx, r.pcie_tx) for r in readings]
    nvlink = [link_throughput(r.nvlink_rx, r.nvlink_tx) for r in readings]
    return GpuSummary(
        index=last.index,
        name=last.name,
        uuid=last.uuid,
        samples=len(readings),
        memory_total=next((r.memory_total for r in reversed(readings) if r.memory_total is not None), None),
        peak_memory_used=None if peak_memory is None else int(peak_memory),
        mean_gpu_util=_mean(r.gpu_util for r in readings),
        peak_gpu_util=_peak(r.gpu_util for r in readings),
        mean_memory_util=_mean(r.memory_util for r in readings),
        mean_power=_mean(r.power for r in readings),
        peak_power=_peak(r.power for r in readings),
        peak_temperature=_peak(r.temperature for r in readings),
        error=errors[-1] if errors else None,
        label=last.label,
        peak_pcie=_peak(pcie),
        mean_pcie=_mean(pcie),
        peak_nvlink=_peak(nvlink),
        mean_nvlink=_mean(nvlink),
    )


def link_throughput(received: float | None, sent: float | None) -> float | None:
    """Bytes/s over a link both ways (received plus sent); ``None`` when neither is known."""
    if received is None and sent is None:
        return None
    return (received or 0.0) + (sent or 0.0)


def _peak(values: Iterable[float | int | None]) -> float | None:
    present = [v for v in values if v is not None]
    return max(present) if present else None


def _mean(values: Iterable[float | int | None]) -> float | None:
    present = [v for v in values if v is not None]
    return sum(present) / len(present) if present else None
