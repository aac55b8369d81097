"""Counting the dask tasks a cell ran: a local-scheduler callback and a distributed scheduler plugin."""

from __future__ import annotations

import contextlib
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


_registered: weakref.WeakSet[Any] = weakref.WeakSet()


def scheduler_task_count(client: Client) -> int | None:
    """The scheduler's running count of finished tasks, or ``None`` where the plugin cannot be installed."""
    try:
        from gpu_magics.scheduler_plugin import TaskCounter, read_count

        if client not in _registered:
            client.register_plugin(TaskCounter())
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
