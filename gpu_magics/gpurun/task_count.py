"""Counting the dask tasks a cell ran: a local-scheduler callback, and a scheduler plugin on a cluster.

The plugin class subclasses distributed's ``SchedulerPlugin``, so it is made on first use (distributed is not
imported for cells that never use a cluster); ``task_count.TaskCounter`` still names it, for pickling.
"""

from __future__ import annotations

import contextlib
import functools
import threading
import weakref
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from dask.callbacks import Callback

if TYPE_CHECKING:
    from distributed import Client


class LocalTaskCounter(Callback):
    """Adds up the size of every graph the local schedulers (synchronous, threads) run."""

    def __init__(self) -> None:
        super().__init__()
        self.tasks = 0
        self._lock = threading.Lock()

    def _start(self, dsk: Any) -> None:
        with self._lock:
            self.tasks += len(dsk)


PLUGIN_NAME = "gpu-magics-task-counter"
_registered: weakref.WeakSet[Any] = weakref.WeakSet()


@functools.cache
def _scheduler_counter_class() -> type:
    from distributed.diagnostics.plugin import SchedulerPlugin

    class TaskCounter(SchedulerPlugin):
        """Counts tasks that went from processing to memory or erred (``count``), and tasks that entered the
        graph to run (``submitted``: released to waiting), in the scheduler."""

        name = PLUGIN_NAME
        idempotent = True

        def __init__(self) -> None:
            self.count = 0
            self.submitted = 0

        def transition(self, key: Any, start: str, finish: str, *args: Any, **kwargs: Any) -> None:
            if start == "processing" and finish in ("memory", "erred"):
                self.count += 1
            elif start == "released" and finish == "waiting":
                self.submitted += 1

    TaskCounter.__module__ = __name__
    TaskCounter.__qualname__ = "TaskCounter"
    return TaskCounter


def __getattr__(name: str) -> Any:
    if name == "TaskCounter":
        return _scheduler_counter_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def read_count(dask_scheduler: Any) -> int | None:
    """Run on the scheduler: the plugin's count, or ``None`` if it is not installed."""
    plugin = dask_scheduler.plugins.get(PLUGIN_NAME)
    return None if plugin is None else int(plugin.count)


def read_progress(dask_scheduler: Any) -> tuple[int, int] | None:
    """Run on the scheduler: (tasks finished, tasks submitted) so far, or ``None`` if the plugin is missing."""
    plugin = dask_scheduler.plugins.get(PLUGIN_NAME)
    return None if plugin is None else (int(plugin.count), int(getattr(plugin, "submitted", 0)))


def scheduler_progress(client: Client) -> tuple[int, int] | None:
    """The scheduler's running (finished, submitted) task counts, or ``None`` where the plugin cannot be
    installed."""
    try:
        if client not in _registered:
            client.register_plugin(_scheduler_counter_class()())
            _registered.add(client)
        counts = client.run_on_scheduler(read_progress)
    except Exception:
        return None
    return None if counts is None else (int(counts[0]), int(counts[1]))


def scheduler_task_count(client: Client) -> int | None:
    """The scheduler's running count of finished tasks, or ``None`` where the plugin cannot be installed."""
    try:
        if client not in _registered:
            client.register_plugin(_scheduler_counter_class()())
            _registered.add(client)
        count = client.run_on_scheduler(read_count)
    except Exception:
        return None
    return None if count is None else int(count)


@contextlib.contextmanager
def counting(client: Client | None) -> Iterator[list[int | None]]:
    """Count tasks run inside the block; the single list item holds the count afterwards (or ``None``)."""
    box: list[int | None] = [None]
    if client is None:
        counter = LocalTaskCounter()
        with counter:
            yield box
        box[0] = counter.tasks
        return
    before = scheduler_task_count(client)
    yield box
    after = scheduler_task_count(client) if before is not None else None
    box[0] = None if before is None or after is None else after - before
