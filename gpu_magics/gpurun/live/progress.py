"""A running cell's progress for its live panel: elapsed time and dask tasks done out of those submitted, and on a
cluster the chunks its runs have done (a run is one task for many chunks: ``graphs.run_progress``).

Local schedulers (synchronous, threads) report through a ``dask.callbacks.Callback``; a cluster through the
scheduler plugin of ``task_count``, polled from a background thread so the cell never waits on it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from dask.callbacks import Callback

from gpu_magics.gpurun.timing import task_count
from gpu_magics.text.units import format_count, format_seconds

if TYPE_CHECKING:
    from distributed import Client

QUIET_FOR = 1.0
"""Seconds a cell runs before its progress shows: short cells stay quiet."""

POLL_EVERY = 0.5
"""Seconds between two reads of a cluster scheduler's counts."""


@dataclass(frozen=True)
class ProgressState:
    """One reading: seconds since the start, tasks finished and tasks submitted (both 0 without dask), chunks
    of runs done and in runs (both 0 without runs)."""

    elapsed: float
    done: int
    total: int
    chunks_done: int = 0
    chunks_total: int = 0

    def text(self) -> str:
        """``'9.12 s elapsed · 120 / 238 dask tasks'``, ``'6.02 s elapsed · 0 / 2 dask tasks · 180 / 400
        chunks'``, or only the elapsed time before any dask task."""
        text = f"{format_seconds(self.elapsed)} elapsed"
        if self.total:
            text += f" · {format_count(min(self.done, self.total))} / {format_count(self.total)} dask tasks"
        if self.chunks_total:
            done = min(self.chunks_done, self.chunks_total)
            text += f" · {format_count(done)} / {format_count(self.chunks_total)} chunks"
        return text


class _LocalCounter(Callback):
    """Counts the tasks the local schedulers are given (``_start_state``) and finish (``_posttask``)."""

    def __init__(self) -> None:
        super().__init__()
        self.done = 0
        self.total = 0
        self._lock = threading.Lock()

    def _start_state(self, dsk: Any, state: Any) -> None:
        with self._lock:
            self.total += len(state["ready"]) + len(state["waiting"])

    def _posttask(self, key: Any, result: Any, dsk: Any, state: Any, worker_id: Any) -> None:
        with self._lock:
            self.done += 1


class Progress:
    """Tracks one cell run from ``start()`` to ``stop()``; ``state()`` is cheap (no I/O) and thread-safe."""

    def __init__(
        self, client: Client | None = None, clock: Callable[[], float] = time.monotonic, *, poll: bool = True
    ) -> None:
        self.client = client
        self.poll = poll  # on a cluster: poll its counts in a thread (else the owner calls ``refresh``)
        self._clock = clock
        self._started = 0.0
        self._local: _LocalCounter | None = None
        self._baseline: tuple[int, ...] | None = None
        self._counts: tuple[int, ...] = (0, 0, 0, 0)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self, baseline: tuple[int, ...] | None = None) -> None:
        """Start counting (on a cluster: read the scheduler's counts once, or take ``baseline``, read before,
        then poll them in a thread)."""
        self._started = self._clock()
        if self.client is None:
            self._local = _LocalCounter()
            self._local.register()
            return
        self._baseline = baseline or task_count.scheduler_progress(self.client)
        if self._baseline is None or not self.poll:
            return
        self._thread = threading.Thread(target=self._poll, name="gpu-magics-progress", daemon=True)
        self._thread.start()

    def _poll(self) -> None:
        while not self._stop.wait(POLL_EVERY):
            self.refresh()

    def refresh(self) -> None:
        """Read a cluster scheduler's counts now (the poll thread does this every ``POLL_EVERY`` s)."""
        if self.client is None or self._baseline is None:
            return
        counts = task_count.scheduler_progress(self.client)
        if counts is not None:
            self._counts = tuple(now - then for now, then in zip(counts, self._baseline, strict=False))

    def stop(self) -> None:
        """Stop counting; ``state()`` keeps the last counts."""
        self._stop.set()
        if self._local is not None:
            self._local.unregister()
        thread, self._thread = self._thread, None
        if thread is not None and thread is not threading.current_thread():
            thread.join(2 * POLL_EVERY)

    def state(self) -> ProgressState:
        """Elapsed seconds and task counts now."""
        counts = (self._local.done, self._local.total) if self._local is not None else self._counts
        return ProgressState(max(0.0, self._clock() - self._started), *counts)

    def text(self) -> str | None:
        """The panel's progress line, or ``None`` in the first ``QUIET_FOR`` seconds."""
        state = self.state()
        return state.text() if state.elapsed >= QUIET_FOR else None


def wait_for_cluster(live: bool, prog: str = "%%gpurun") -> float:
    """Wait for the cluster's start under way (``live``: with a line in this cell that says how far it got, and
    then how long it waited, not counted in the cell's time; ``prog``: the magic that waits); the seconds waited
    (0: no start was under way). Its failure is one ``UsageError`` line, an interrupt one line too."""
    from gpu_magics.cluster.control import queries

    pending = queries.start_under_way()
    if pending is None:
        return 0.0
    began = time.perf_counter()
    if not live:
        queries.settle_start()
        return time.perf_counter() - began
    from IPython.display import display

    from gpu_magics.display.start_line import StartText

    def text(joined: int, warm: int, expected: int) -> StartText:
        up = max(joined, warm)  # a worker counts as up once it is warm, whichever was heard first
        return StartText(f"{prog}: waiting for the cluster to start ({up} of {expected} up, {warm} warm) ...")

    try:  # an interrupt that lands in a display's send (the line already seen) is the wait's one line too
        now = pending.progress()
        handle = display(text(now.joined, now.warm, now.expected), display_id=True)
        stop = pending.listen(lambda p: None if p.finished else handle.update(text(p.joined, p.warm, p.expected)))
        said = ""
        try:
            queries.settle_start()
            took = format_seconds(time.perf_counter() - began)
            said = f"{prog}: waited {took} for the cluster to start, not counted in the cell's time"
        finally:
            stop()
            handle.update(StartText(said))
    except KeyboardInterrupt as interrupt:
        if getattr(interrupt, "frames_hidden", False) or pending.finished.is_set():
            raise
        raise pending.interrupted() from None
    return time.perf_counter() - began
