"""In the kernel: what the server's ``GpuMagicsServer.idle_reclaim_min`` does once this notebook's GPU memory has sat
on idle GPUs that long. The server asks between cells (a silent request, as the side panel's buttons run
``%gpucluster free``); ``run`` answers it.

It gives back what the pools cache, in the kernel and on the cluster's workers (CuPy's, RMM's where it shrinks,
PyTorch's caching allocator): that loses nothing. It closes the cluster only where closing loses nothing the user
holds: a cluster this kernel started, with no start under way, no task queued or running, no SPMD ranks (their
variables live in the rank processes), and nothing kept on it for any client (the scheduler's ``who_wants``:
persisted collections, futures, published datasets, dask ``Variable``s). Otherwise the cluster stays, and the line
says why. The kernel itself is never ended.

What it did is said in one line at the top of the next cell the notebook runs: a line printed now would go to the
server's request, which no cell shows.
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

from gpu_magics.cluster.options import PROG
from gpu_magics.text.errors import ClusterError
from gpu_magics.text.units import dropped, format_bytes, format_duration, one_line

SETTING = "GpuMagicsServer.idle_reclaim_min"
_pending: list[str] = []


def run(idle_s: float, park: bool = False) -> dict[str, Any]:
    """Free the cached memory, close the idle cluster where that loses nothing (``park``: park its GPU workers
    instead, their data kept, where they can be), say so at the next cell; returns ``{"freed": bytes, "cluster": name
    or None, "stopped": bool, "parked": bool, "kept": why or None, "line": str or None}``."""
    from gpu_magics.cluster.control.kernel_cluster import in_use
    from gpu_magics.cluster.control.verbs import stop

    freed = _free_kernel()
    current = in_use()
    name = None if current is None else str(current.name)
    stopped, parked, kept = False, False, None
    if current is not None and current.parked is not None:  # parked already: its workers hold no GPU memory
        current = None
    if current is not None and park and current.manager.park_targets():
        freed += _free_workers(current.client)
        parked, kept = _park(current)
        current = None
    if current is not None:
        kept = why_kept(current) if current.owned else None
        if current.owned and kept is None:
            try:
                stop.stop()
            except (OSError, RuntimeError) as error:  # said in the line, the kernel goes on: the record's file, a
                # loop gone (stop says a failure of the close itself in its own line)
                dropped("closing the idle cluster", error)
                kept = f"closing it failed ({one_line(error)})"
            stopped = kept is None and in_use() is None
        if not stopped:
            freed += _free_workers(current.client)
    line = said(idle_s, freed, name if (stopped or parked or kept) else None, stopped, kept, parked)
    if line is not None:
        say_at_next_cell(line)
    return {"freed": freed, "cluster": name, "stopped": stopped, "parked": parked, "kept": kept, "line": line}


def _park(current: Any) -> tuple[bool, str | None]:
    """Park ``current``'s GPU workers: (parked, why not)."""
    from gpu_magics.cluster.control.verbs import park

    try:
        park.park()
    except ClusterError as error:  # tasks run, or the driver refused: the line says why it stays as it was
        return False, str(error).split(": ", 1)[-1]
    return True, None


def why_kept(current: Any) -> str | None:
    """Why closing the cluster ``current`` would lose something of the user's (``None``: nothing would be lost)."""
    from gpu_magics.cluster.control.queries import start_under_way

    if start_under_way() is not None:
        return "it is still starting"
    ranks = sys.modules.get("gpu_magics.spmd.kernel.ranks")
    made = None if ranks is None else ranks.current()
    if made is not None and made.world is not None:
        return "its SPMD ranks hold their variables; end them with %gpurun spmd --reset"
    try:
        current.client.sync(asyncio.sleep, 0)  # the releases of futures already dropped go first
        wanted, busy = current.client.run_on_scheduler(held_on_scheduler)
        wanted = max(int(wanted), len(current.client.futures))
    except (OSError, RuntimeError, AttributeError) as error:  # nothing can be told, so nothing is closed:
        # the scheduler silent or gone (CommClosedError, TimeoutError), the client's loop or the client closed
        dropped("asking the scheduler what it keeps", error)
        return "its scheduler did not answer"
    if wanted:
        pieces = "1 piece" if wanted == 1 else f"{wanted} pieces"
        return f"it keeps {pieces} of data (persisted collections, futures); close it with {PROG} stop"
    if busy:
        return "it is running tasks"
    return None


def held_on_scheduler(dask_scheduler: Any = None) -> tuple[int, int]:
    """``run_on_scheduler`` target: (tasks some client wants kept, tasks queued or running)."""
    wanted = busy = 0
    for task in dask_scheduler.tasks.values():
        wanted += bool(task.who_wants)
        busy += task.state in ("processing", "queued", "waiting", "no-worker")
    return wanted, busy


def said(
    idle_s: float, freed: int, cluster: str | None, stopped: bool, kept: str | None, parked: bool = False
) -> str | None:
    """The one line: what was done after ``idle_s`` seconds on idle GPUs (``None`` where nothing was)."""
    done = [f"gave back {format_bytes(freed)} of cached GPU memory"] if freed > 0 else []
    if cluster is not None and parked:
        done.append(
            f"parked cluster {cluster!r}: its GPUs are back on the server and your data is kept; the next cell that "
            "sends it work resumes it"
        )
    elif cluster is not None and stopped:
        done.append(f"closed cluster {cluster!r}, which held none of your data; start a new one with {PROG}")
    elif cluster is not None and kept is not None:
        done.append(f"left cluster {cluster!r} running: {kept}")
    if not done:
        return None
    return f"{PROG}: idle GPUs for {format_duration(idle_s)}: the server ({SETTING}) {' and '.join(done)}"


def say_at_next_cell(line: str) -> None:
    """Print ``line`` at the top of the next cell the notebook runs (now, outside IPython)."""
    from IPython import get_ipython

    shell = get_ipython()
    events = getattr(shell, "events", None)
    if events is None:
        print(line)
        return
    _pending.append(line)
    if _say_pending not in events.callbacks.get("pre_run_cell", []):
        events.register("pre_run_cell", _say_pending)


def _say_pending(info: Any = None) -> None:
    """IPython's ``pre_run_cell`` (not called for silent requests such as the side panel's): the lines, once."""
    lines = list(_pending)
    _pending.clear()
    for line in lines:
        print(line)
    from IPython import get_ipython

    events = getattr(get_ipython(), "events", None)
    if events is not None and _say_pending in events.callbacks.get("pre_run_cell", []):
        events.unregister("pre_run_cell", _say_pending)


def _free_kernel() -> int:
    """What the kernel's own pools give back (bytes)."""
    from gpu_magics.cluster.records import kernel_report

    freed = 0
    try:
        freed = sum(item.released for item in kernel_report.free().values())
    except RuntimeError as error:  # CuPy's CUDA errors: a pool that cannot be freed, the rest still is
        dropped("freeing the kernel's pools", error)
    return freed + torch_release()


def _free_workers(client: Any) -> int:
    """What the workers' pools give back (bytes)."""
    from gpu_magics.cluster.telemetry.pools import free_workers

    try:
        released = free_workers(client)[0]
        return released + sum(int(n or 0) for n in client.run(torch_release, on_error="return").values()
                              if isinstance(n, int))  # fmt: skip
    except (OSError, RuntimeError, AttributeError) as error:  # workers that do not answer keep their cache:
        # their errors come back as answers; the scheduler silent or gone, the client's loop or the client closed
        dropped("freeing the workers' pools", error)
        return 0


def torch_release(dask_worker: Any = None) -> int:
    """Empty PyTorch's caching allocator where this process already uses CUDA through it (never starts CUDA);
    bytes released. Also a ``client.run`` target."""
    torch = sys.modules.get("torch")
    try:
        if torch is None or not torch.cuda.is_initialized():
            return 0
        devices = range(torch.cuda.device_count())
        before = sum(int(torch.cuda.memory_reserved(device)) for device in devices)
        torch.cuda.empty_cache()
        return max(0, before - sum(int(torch.cuda.memory_reserved(device)) for device in devices))
    except RuntimeError as error:  # PyTorch's CUDA errors are RuntimeErrors: its cache stays
        dropped("emptying PyTorch's cache", error)
        return 0
