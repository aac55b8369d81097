"""The chunks a run has done, counted while it runs: a run (``grouping``, ``folding``) is one task for hundreds of
chunks, so counting tasks sees nothing finish until the end.

Each chunk of a run, once computed, counts itself in its worker thread, and at most every ``REPORT_EVERY`` seconds
(the first chunk at once) its run's count goes to the scheduler as an event (``Worker.log_event`` on ``TOPIC``,
the worker's batched stream: no extra connection, no wait). In the scheduler, ``ChunkCount`` (kept by the task
counter plugin, ``task_count``) learns each run's size as the run's task enters the graph (its chunk tasks), adds
up the chunks the events report, and counts a finished run whole (its last chunks' event may not have been sent).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Hashable
from typing import Any

TOPIC = "gpu-magics-run-chunks"
REPORT_EVERY = 0.2  # seconds between two events of one run (its first chunk reports at once)

_thread_count = threading.local()  # the run this worker thread computes: its key, chunks done, last report


def running_task() -> tuple[Any, Any]:
    """(key, worker) of the worker task this thread runs; ``(None, None)`` outside a worker's task."""
    from distributed.utils import thread_state

    key = getattr(thread_state, "key", None)
    execution = getattr(thread_state, "execution_state", None)
    worker = execution.get("worker") if key is not None and isinstance(execution, dict) else None
    return (key, worker) if worker is not None else (None, None)


def chunk_done() -> None:
    """In a worker: one more chunk of the run this thread computes, reported now and then (see above). Never
    raises: a lost report only leaves the count behind until the run finishes."""
    key, worker = running_task()
    if worker is None:
        return
    mine = _thread_count
    if getattr(mine, "key", None) != key:
        mine.key, mine.done, mine.sent = key, 0, 0.0
    mine.done += 1
    now = time.monotonic()
    if now - mine.sent < REPORT_EVERY:
        return
    mine.sent = now
    try:
        worker.log_event(TOPIC, {"key": list(key) if isinstance(key, tuple) else key, "done": mine.done})
    except (TypeError, RuntimeError) as error:  # a key msgpack cannot carry, a closing worker's loop: the run's end
        # counts it whole
        from gpu_magics.text.units import dropped

        dropped("reporting a run's chunks to the scheduler", error, once=True)


CHUNK = ("gpu_magics.gpurun.graphs.run_stop", "chunk")  # a run's chunk tasks call it (named: it reports here)


def run_size(run_spec: Any) -> int:
    """How many chunks the task ``run_spec`` computes as a run (its arguments that are chunk tasks; 0: not a
    run)."""
    args = getattr(run_spec, "args", None)
    if not isinstance(args, tuple):
        return 0
    return sum(1 for arg in args if _is_chunk(getattr(arg, "func", None)))


def _is_chunk(func: Any) -> bool:
    return (getattr(func, "__module__", None), getattr(func, "__name__", None)) == CHUNK


class ChunkCount:
    """In the scheduler: chunks of runs done (``done``) and in runs that entered the graph (``total``), ever."""

    def __init__(self) -> None:
        self.done = 0
        self.total = 0
        self._runs: dict[Hashable, list[int]] = {}  # run key -> [size, chunks counted]

    def entered(self, key: Hashable, run_spec: Any) -> None:
        """A task entered the graph to run: a run's chunks count in the total."""
        if key in self._runs:
            return
        size = run_size(run_spec)
        if size:
            self._runs[key] = [size, 0]
            self.total += size

    def reported(self, message: Any) -> None:
        """A worker's event: ``{"key": run key, "done": chunks of it done so far}``."""
        if not isinstance(message, dict):
            return
        key = message.get("key")
        run = self._runs.get(tuple(key) if isinstance(key, list) else key)
        if run is not None:
            self._count(run, int(message.get("done", 0)))

    def finished(self, key: Hashable) -> None:
        """A run's task is done: every chunk of it counts."""
        run = self._runs.pop(key, None)
        if run is not None:
            self._count(run, run[0])

    def dropped(self, key: Hashable) -> None:
        """A run's task failed or was forgotten: its chunks count as far as they were reported."""
        self._runs.pop(key, None)

    def _count(self, run: list[int], done: int) -> None:
        more = min(done, run[0]) - run[1]
        if more > 0:
            run[1] += more
            self.done += more
