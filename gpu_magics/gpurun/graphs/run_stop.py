"""A run stops between its chunks once its task is released: an interrupted cell's work ends with the chunk it is on.

A run (``grouping``, ``folding``) computes many chunks in one task. When the cell that asked for it is interrupted,
its client releases the task; the scheduler tells the worker to forget it, and the worker marks the task
cancelled, but the thread already running it goes on (a Python thread cannot be stopped from outside): a run of
200 chunks would keep its worker busy for all of them, and the next cell would wait behind it. So each chunk of a
run first looks at its task's state in the worker it runs in (a dictionary read in that process, no message) and
ends the run once the worker no longer computes the task for anyone. Outside a worker (dask's local schedulers)
the look finds no task and the chunk runs. Each chunk done is counted for the cell's progress (``run_progress``).
"""

from __future__ import annotations

from typing import Any


class RunReleased(Exception):
    """Raised inside a run whose task was released: the worker drops it with the task, nobody waits for it."""


def chunk(func: Any, /, *args: Any, **kwargs: Any) -> Any:
    """A chunk of a run: ``func(*args, **kwargs)``, unless the run's task was released (``RunReleased``)."""
    from gpu_magics.gpurun.graphs import run_progress

    if released():
        raise RunReleased("the task running this chunk was released (its cell was interrupted)")
    value = func(*args, **kwargs)
    run_progress.chunk_done()
    return value


def released() -> bool:
    """Whether the worker task this thread runs was released: cancelled (its client let go while it ran) or
    already forgotten. ``False`` outside a worker's task."""
    from gpu_magics.gpurun.graphs.run_progress import running_task

    key, worker = running_task()
    state = getattr(worker, "state", None)
    if state is None:
        return False
    task = state.tasks.get(key)
    return task is None or task.state == "cancelled"


def chunk_task(node: Any) -> Any:
    """The task ``node`` as one chunk of a run: no key of its own, and the look at the run's state first."""
    from dask._task_spec import Task

    return Task(None, chunk, node.func, *node.args, **node.kwargs)
