"""A distributed scheduler plugin that counts the tasks the workers finish (imported only with a cluster)."""

from __future__ import annotations

from typing import Any

from distributed.diagnostics.plugin import SchedulerPlugin

PLUGIN_NAME = "gpu-magics-task-counter"


class TaskCounter(SchedulerPlugin):
    """Counts tasks that went from processing to memory or erred."""

    name = PLUGIN_NAME
    idempotent = True

    def __init__(self) -> None:
        self.count = 0

    def transition(self, key: Any, start: str, finish: str, *args: Any, **kwargs: Any) -> None:
        if start == "processing" and finish in ("memory", "erred"):
            self.count += 1


def read_count(dask_scheduler: Any) -> int | None:
    """Run on the scheduler: the plugin's count, or ``None`` if it is not installed."""
    plugin = dask_scheduler.plugins.get(PLUGIN_NAME)
    return None if plugin is None else int(plugin.count)
