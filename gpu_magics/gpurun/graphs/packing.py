"""A run's leaf tasks packed into one ``bytes``: what the scheduler passes on without reading it.

A run (``grouping``, ``folding``) computes a contiguous run of a reduction's leaves, tasks that read nothing from
the graph. As task objects, each run carries a hundred-odd of them (25 chunks of 4 fused steps on 4 GPUs), which
the scheduler unpickles as the graph arrives (most of its time on it) and pickles again into each worker's message
(a millisecond a message, so the last GPU started 3 ms after the first). Pickled once into one ``bytes`` where the
graph is optimized, the run's message costs the scheduler nearly nothing, and the worker unpickles and computes the
same tasks in the same order. Leaves that do not pickle stay tasks: dask's own error names the object when the
graph is sent, as for any other cell.
"""

from __future__ import annotations

from typing import Any


def pack(tasks: list[Any]) -> bytes | None:
    """``tasks`` (a run's leaves) pickled into one ``bytes``, or ``None`` where one of them does not pickle."""
    from distributed.protocol.pickle import dumps

    try:
        return dumps(tasks)
    except Exception:  # any error of any object's pickling: the tasks go as they are, dask reports it there
        return None


def computed(packed: bytes) -> list[Any]:
    """On the worker: the results of the tasks ``pack`` packed, computed in order."""
    from distributed.protocol.pickle import loads

    return [task({}) for task in loads(packed)]


def together_packed(packed: bytes) -> tuple[Any, ...]:
    """A run's task (``grouping.together``) with its leaves packed: their results, as one tuple."""
    return tuple(computed(packed))


def leaves_of(run: Any) -> list[Any]:
    """The leaf tasks of a run's task: unpacked where packed, else its arguments that are tasks."""
    from dask._task_spec import Task
    from distributed.protocol.pickle import loads

    last = run.args[-1] if run.args else None
    if isinstance(last, bytes):
        return list(loads(last))
    return [arg for arg in run.args if isinstance(arg, Task)]
