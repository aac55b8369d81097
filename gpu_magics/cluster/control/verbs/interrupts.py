"""What an interrupted ``%%gpurun multi-gpu`` cell leaves on the cluster, and stopping it.

Interrupting a cell releases its futures, so the scheduler drops the tasks that had not started, and a run of
many chunks in one task stops before its next chunk (``gpurun.graphs.run_stop``); a single task already running on
a worker goes on until it finishes (a Python thread cannot be stopped from outside), keeping the worker busy. The
line waits up to ``STOP_WAIT`` for the runs to stop, says how many tasks still run and how to stop them, and can
restart the workers (the way ipyparallel's ``--signal-on-interrupt`` passes an interrupt on to its engines).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from IPython.core.error import UsageError

from gpu_magics.cluster.options import PROG
from gpu_magics.text.units import dropped

if TYPE_CHECKING:
    from distributed import Client

STOP_WAIT = 2.0  # seconds the line waits for the interrupted runs to stop between their chunks


def _running_here(dask_worker: Any) -> int:
    """Run in a worker: tasks its threads still run, released ones included (the scheduler forgets those,
    the threads go on)."""
    running = 0
    for task in dask_worker.state.tasks.values():
        state = task.state if task.state != "cancelled" else task.previous
        running += state in ("executing", "long-running")
    return running


def running_tasks(client: Client) -> int | None:
    """How many tasks the workers are running now, or ``None`` when they do not answer."""
    try:
        counts = client.run(_running_here, wait=True, on_error="return")  # a worker's failure comes back as its answer
    except (OSError, RuntimeError, AttributeError) as error:  # the scheduler silent or gone, the loop or client closed
        dropped("asking the workers what still runs", error)
        return None
    failed = [count for count in counts.values() if isinstance(count, BaseException)]
    if failed:  # the line then says it is not known
        dropped("asking the workers what still runs", failed[0])
        return None
    return sum(int(count) for count in counts.values())


def running_after_stop(client: Client, wait: float = STOP_WAIT) -> int | None:
    """``running_tasks`` once it is 0, or after ``wait`` seconds (or a second interrupt): the released runs stop
    between their chunks."""
    deadline = time.monotonic() + wait
    count = running_tasks(client)
    try:
        while count and time.monotonic() < deadline:
            time.sleep(0.1)
            count = running_tasks(client)
    except KeyboardInterrupt:  # the user stops the wait: the last count is the line's
        pass
    return count


def after_interrupt(client: Client, *, restart: bool) -> str:
    """One line for the user after an interrupt; with ``restart``, restart the workers of a cluster started
    here first (tasks still running stop, their memory is freed)."""
    from gpu_magics.cluster.control import queries
    from gpu_magics.cluster.control.verbs import change

    count = running_after_stop(client)
    current = queries.active()
    ours = current is not None and current.client is client and current.owned
    if restart and count and ours:
        try:
            change.restart()
        except (UsageError, TimeoutError, OSError, RuntimeError) as error:  # its one line (StartFailed, ...), a wait
            # that timed out, the scheduler silent or gone: said in the interrupt's line
            dropped("restarting the workers after an interrupt", error)
            return f"{PROG}: interrupted; restarting the workers failed ({error}); try {PROG} restart"
        return f"{PROG}: interrupted; restarted the workers, which stopped {_tasks(count)} still running"
    if count is None:
        return f"{PROG}: interrupted; the scheduler did not say what still runs ({PROG} status)"
    if count == 0:
        return f"{PROG}: interrupted; nothing is left running on the cluster"
    if not ours:
        return (
            f"{PROG}: interrupted; {_tasks(count)} still running on the cluster keep its workers busy until they "
            "finish (this kernel attached to it and does not restart its workers)"
        )
    return (
        f"{PROG}: interrupted; {_tasks(count)} still running on the cluster keep its workers busy until they "
        f"finish: {PROG} restart stops them (%config GpuMagics.restart_on_interrupt = True does it on every "
        "interrupt)"
    )


def _tasks(count: int) -> str:
    return f"{count} task{'s' if count != 1 else ''}"
