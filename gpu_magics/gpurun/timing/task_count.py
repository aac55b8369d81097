"""Counting the dask tasks a cell ran: a local-scheduler callback, and a scheduler plugin on a cluster.

The plugin class subclasses distributed's ``SchedulerPlugin``, so it is made on first use (distributed is not
imported for cells that never use a cluster); ``task_count.TaskCounter`` still names it, for pickling.
"""

from __future__ import annotations

import contextlib
import functools
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from dask.callbacks import Callback

from gpu_magics.cluster.control import queries
from gpu_magics.gpurun.graphs import run_progress
from gpu_magics.gpurun.timing import time_split
from gpu_magics.gpurun.timing.time_split import TaskTiming, TimeSplit
from gpu_magics.text.units import dropped

if TYPE_CHECKING:
    from distributed import Client


class LocalTaskCounter(Callback):
    """Adds up the size of every graph the local schedulers (synchronous, threads) run; with ``timed``, also
    records when each task ran (for the time split), per thread."""

    def __init__(self, timed: bool = False) -> None:
        super().__init__()
        self.tasks = 0
        self.timed = timed
        self.started: dict[Any, float] = {}
        self.timings: list[TaskTiming] = []
        self.arrivals: list[float] = []
        self._lock = threading.Lock()

    def _start(self, dsk: Any) -> None:
        with self._lock:
            self.tasks += len(dsk)
            if self.timed:
                self.arrivals.append(time.time())

    def _pretask(self, key: Any, dsk: Any, state: Any) -> None:
        if self.timed:
            self.started[key] = time.time()

    def _posttask(self, key: Any, result: Any, dsk: Any, state: Any, worker_id: Any) -> None:
        if self.timed:
            began = self.started.pop(key, None)
            if began is not None:
                self.timings.append(TaskTiming("local", began, time.time(), key_prefix(key)))


PLUGIN_NAME = "gpu-magics-task-counter"
_registered: weakref.WeakSet[Any] = weakref.WeakSet()


TIMELINE_LIMIT = 200_000  # task records the scheduler keeps for the cells' time splits


@functools.cache
def _scheduler_counter_class() -> type:
    from collections import deque

    from distributed.diagnostics.plugin import SchedulerPlugin

    class TaskCounter(SchedulerPlugin):
        """Counts tasks that went from processing to memory or erred (``count``), and tasks that entered the
        graph to run (``submitted``: released to waiting), in the scheduler, and the chunks of runs done
        (``chunks``: the workers' events, ``run_progress``). Keeps a bounded timeline of the finished tasks
        (worker, compute and transfer times, prefix), the graphs' arrival times and the bytes each task fetched
        from other workers, for the cells' time splits (``time_split``)."""

        name = PLUGIN_NAME
        idempotent = True

        def __init__(self) -> None:
            self.count = 0
            self.submitted = 0
            self.timeline: deque[tuple[Any, ...]] = deque(maxlen=TIMELINE_LIMIT)
            self.arrivals: deque[float] = deque(maxlen=1000)
            self.recorded = 0  # records ever appended to the timeline (it keeps the last TIMELINE_LIMIT)
            self.arrived = 0
            self.computed_on: dict[Any, str] = {}
            self.scheduler: Any = None
            self.chunks = run_progress.ChunkCount()

        async def start(self, scheduler: Any) -> None:
            self.scheduler = scheduler

        def update_graph(self, scheduler: Any, **kwargs: Any) -> None:
            from time import time

            self.arrivals.append(time())
            self.arrived += 1

        def transition(self, key: Any, start: str, finish: str, *args: Any, **kwargs: Any) -> None:
            if start == "processing" and finish in ("memory", "erred"):
                self.count += 1
                self._record(key, kwargs)
                if finish == "memory":
                    self.chunks.finished(key)
                else:
                    self.chunks.dropped(key)
            elif start == "released" and finish == "waiting":
                self.submitted += 1
                task = self.scheduler.tasks.get(key) if self.scheduler is not None else None
                self.chunks.entered(key, getattr(task, "run_spec", None))
            elif finish == "forgotten":
                self.computed_on.pop(key, None)
                self.chunks.dropped(key)

        def log_event(self, topic: str, msg: Any) -> None:
            if topic == run_progress.TOPIC:
                self.chunks.reported(msg)

        def _record(self, key: Any, kwargs: dict[str, Any]) -> None:
            worker = kwargs.get("worker")
            spans = kwargs.get("startstops") or ()
            if worker is None or not spans:
                return
            compute = [(s["start"], s["stop"]) for s in spans if s.get("action") == "compute"]
            fetched = tuple((s["start"], s["stop"]) for s in spans if s.get("action") == "transfer")
            moved = 0
            if fetched and self.scheduler is not None:
                task = self.scheduler.tasks.get(key)
                for dependency in task.dependencies if task is not None else ():
                    if self.computed_on.get(dependency.key, worker) != worker:
                        moved += dependency.nbytes if dependency.nbytes > 0 else 0
            self.computed_on[key] = worker
            if compute:
                self.timeline.append((worker, compute[0][0], compute[-1][1], key_prefix(key), fetched, moved))
                self.recorded += 1

    TaskCounter.__module__ = __name__
    TaskCounter.__qualname__ = "TaskCounter"
    return TaskCounter


def key_prefix(key: Any) -> str:
    """``'add-getitem-normal'`` for ``('add-getitem-normal-3b42fd...', 0, 0)``: the task's name less its token."""
    name = str(key[0] if isinstance(key, tuple) and key else key)
    head, _, tail = name.rpartition("-")
    return head if head and len(tail) >= 8 else name


def __getattr__(name: str) -> Any:
    if name == "TaskCounter":
        return _scheduler_counter_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def read_mark(dask_scheduler: Any) -> tuple[int, int, int, float] | None:
    """Run on the scheduler: (count, timeline records so far, arrivals so far, the scheduler's clock)."""
    from time import time

    plugin = dask_scheduler.plugins.get(PLUGIN_NAME)
    if plugin is None:
        return None
    return int(plugin.count), int(plugin.recorded), int(plugin.arrived), time()


def read_since(dask_scheduler: Any, records: int, arrivals: int) -> dict[str, Any] | None:
    """Run on the scheduler: the count, and the timeline records and graph arrivals after the given marks."""
    from time import time

    plugin = dask_scheduler.plugins.get(PLUGIN_NAME)
    if plugin is None:
        return None
    return {
        "count": int(plugin.count),
        "records": _after(plugin.timeline, plugin.recorded, records),
        "arrivals": _after(plugin.arrivals, plugin.arrived, arrivals),
        "now": time(),
        "workers": len(dask_scheduler.workers),
    }


def _after(ring: Any, appended: int, mark: int) -> list[Any]:
    """The items of a bounded deque appended after ``mark`` (``appended``: how many were ever appended)."""
    fresh = min(max(appended - mark, 0), len(ring))
    return list(ring)[len(ring) - fresh :] if fresh else []


def read_progress(dask_scheduler: Any) -> tuple[int, int, int, int] | None:
    """Run on the scheduler: (tasks finished, tasks submitted, chunks of runs done, chunks in runs) so far, or
    ``None`` if the plugin is missing."""
    plugin = dask_scheduler.plugins.get(PLUGIN_NAME)
    if plugin is None:
        return None
    chunks = getattr(plugin, "chunks", None)  # a plugin an older version of this package installed has none
    done, total = (chunks.done, chunks.total) if chunks is not None else (0, 0)
    return int(plugin.count), int(getattr(plugin, "submitted", 0)), int(done), int(total)


def _settled_since(scheduler: Any, progress: tuple[int, ...]) -> int | None:
    """The tasks finished since ``progress`` (``read_progress`` then) where every task submitted since has
    finished, else ``None``."""
    now = read_progress(dask_scheduler=scheduler)
    if now is None:
        return None
    finished, submitted = now[0] - progress[0], now[1] - progress[1]
    return finished if finished == submitted else None


def scheduler_progress(client: Client) -> tuple[int, int, int, int] | None:
    """The scheduler's running counts (``read_progress``), or ``None`` where the plugin cannot be installed."""
    if not plugin_installed(client):
        return None
    counts = _answer(READING, lambda: _on_scheduler(client, read_progress))
    return None if counts is None else (int(counts[0]), int(counts[1]), int(counts[2]), int(counts[3]))


def progress_in_place(client: Client) -> tuple[int, int, int, int] | None:
    """``read_progress`` where the scheduler runs in this process and the plugin is there already: no message,
    no wait; else ``None``."""
    scheduler = queries.local_scheduler(client)
    if scheduler is None or client not in _registered:
        return None
    try:
        return read_progress(dask_scheduler=scheduler)
    except RuntimeError:  # the scheduler's loop changed what was read
        return None


@dataclass
class Recorded:
    """What ``recording`` saw: the tasks a cell ran, and where its time went (``None`` where unknown)."""

    tasks: int | None = None
    split: TimeSplit | None = None
    ran_tasks: Callable[[], bool] = lambda: True  # whether the block has run a task so far (True where unknown)
    settled: Callable[[], int | None] = lambda: None  # tasks finished so far where none still waits or runs


@contextlib.contextmanager
def recording(
    client: Client | None, *, split: bool = False, gpu: bool = True, workers: int | None = None
) -> Iterator[Recorded]:
    """Count the tasks run inside the block and, with ``split``, split its wall time (``time_split``) among
    ``workers`` (default: the cluster's workers; one device without a client)."""
    box = Recorded()
    if client is None:
        counter = LocalTaskCounter(timed=split)
        began = time.time()
        with counter:
            yield box
        ended = time.time()
        box.tasks = counter.tasks
        if split:
            box.split = time_split.split(began, ended, counter.timings, workers=1, arrivals=counter.arrivals, gpu=gpu)
        return
    mark = scheduler_mark(client)
    local = queries.local_scheduler(client)
    if mark is not None and local is not None:  # read in place: free to ask
        box.ran_tasks = lambda: (_on_scheduler(client, read_mark) or mark)[0] != mark[0]
        progress = read_progress(dask_scheduler=local)
        if progress is not None:
            box.settled = lambda: _settled_since(local, progress)
    began = time.time()
    yield box
    ended = time.time()
    if mark is None:
        return
    after = _read_since(client, mark)
    if after is None:
        return
    box.tasks = int(after["count"]) - mark[0]
    if split:
        box.split = _cluster_split(after, began, ended, gpu, workers)


def plugin_installed(client: Client) -> bool:
    """Install the counting plugin on the client's scheduler once; whether it is there (the scheduler could
    import this package)."""
    if client in _registered:
        return True
    if not _answer("installing the task counter on the scheduler", lambda: _install(client)):
        return False  # the scheduler refused it (it cannot import this package): no counts
    _registered.add(client)
    return True


def _install(client: Client) -> bool:
    client.register_plugin(_scheduler_counter_class()())
    return True


def scheduler_mark(client: Client) -> tuple[int, int, int, float] | None:
    """The scheduler's counts before a cell (``read_mark``), or ``None`` where the plugin cannot be installed."""
    if not plugin_installed(client):
        return None
    answer: tuple[int, int, int, float] | None = _answer(READING, lambda: _on_scheduler(client, read_mark))
    return answer


def _read_since(client: Client, mark: tuple[int, int, int, float]) -> dict[str, Any] | None:
    answer: dict[str, Any] | None = _answer(
        READING, lambda: _on_scheduler(client, read_since, records=mark[1], arrivals=mark[2])
    )
    return answer


READING = "reading the task counts on the scheduler"


def _answer(what: str, ask: Callable[[], Any]) -> Any:
    """What ``ask`` (installing or reading the counting plugin on the scheduler) returns, or ``None`` when it
    fails (``what`` failed, once in the debug log)."""
    try:
        return ask()
    except Exception as error:  # the scheduler's comm or the plugin there may fail any way: counts unknown
        dropped(what, error, once=True)
        return None


def _on_scheduler(client: Client, function: Any, **kwargs: Any) -> Any:
    """``function`` run on the scheduler: called here where the scheduler runs in this process (no round trip;
    it only reads the plugin's counts), else through ``run_on_scheduler``."""
    scheduler = queries.local_scheduler(client)
    if scheduler is not None:
        try:
            return function(dask_scheduler=scheduler, **kwargs)
        except RuntimeError:  # the scheduler's loop changed what was read: ask on that loop
            pass
    return client.run_on_scheduler(function, **kwargs)


def _cluster_split(
    after: dict[str, Any], began: float, ended: float, gpu: bool, workers: int | None
) -> time_split.TimeSplit:
    """The split from the scheduler's records, moved to this process's clock (the scheduler's clock read at
    the end, against the middle of the round trip)."""
    offset = float(after["now"]) - (ended + time.time()) / 2
    timings = [
        TaskTiming(
            str(worker),
            start - offset,
            stop - offset,
            prefix,
            tuple((low - offset, high - offset) for low, high in fetched),
        )
        for worker, start, stop, prefix, fetched, _moved in after["records"]
    ]
    arrivals = [float(when) - offset for when in after["arrivals"]]
    moved = sum(int(record[5]) for record in after["records"])
    return time_split.split(
        began,
        ended,
        time_split.fit_workers(timings, (min(arrivals, default=began), ended)),
        workers=workers or int(after.get("workers", 0)),
        arrivals=arrivals,
        transfer_bytes=moved,
        gpu=gpu,
    )
