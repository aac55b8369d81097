"""The kernel's side of the notebook's memory cap: the server's cap (``GPU_MAGICS_MEMORY_CAP`` in the kernel's
environment, set by the server that started it), the user's own lower one (``%gpumemory --cap``), and each of the
notebook's processes' share on each GPU: the kernel, the worker of a cluster the kernel started there, the SPMD rank
there. The kernel limits its own allocators; the cluster's workers get theirs from a worker plugin (given again
when ranks come or go), the ranks from their environment.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterable
from typing import Any

from gpu_magics import gpus
from gpu_magics.arrays.caps import allocators
from gpu_magics.arrays.caps.cap import SERVER_CAP_ENV, CapError, MemoryCap, lower, parse_cap, share
from gpu_magics.text.units import dropped, format_bytes

_lock = threading.Lock()
_user: MemoryCap | None = None
_workers: set[str] = set()  # the GPUs (UUIDs) where a worker of the kernel's own cluster runs
_ranks: set[str] = set()  # the GPUs where an SPMD rank of the kernel runs
_client: Any = None  # the client of that cluster, to give its workers their shares again


def server_cap() -> MemoryCap | None:
    """The server's cap (``None``: none, or one this kernel cannot read, which the server would have refused)."""
    try:
        return parse_cap(os.environ.get(SERVER_CAP_ENV, ""), by="server")
    except CapError as error:
        dropped("reading the server's memory cap", error, once=True)
        return None


def user_cap() -> MemoryCap | None:
    return _user


def set_user_cap(text: str) -> MemoryCap | None:
    """The user's own cap (``off`` lifts it); ``CapError`` where it cannot be: not a size, above a GPU's memory,
    above the server's cap. The kernel's limits follow at once."""
    global _user
    devices = gpus.inventory().devices()
    smallest = min((d.memory_total for d in devices if d.memory_total), default=None)
    wanted = parse_cap(text, by="notebook", gpu_memory=smallest)
    server = server_cap()
    if wanted is not None and server is not None and devices:
        over = [(d.index, m) for d in devices if (m := d.memory_total) and wanted.on(m) > server.on(m)]
        if over:
            index, memory = over[0]
            raise CapError(
                f"memory cap {text.strip()!r} is above the server's cap ({format_bytes(server.on(memory))} on GPU "
                f"{index}): a notebook may only lower it"
            )
    with _lock:
        _user = wanted
    apply()
    return cap_for(smallest or 0)


def cap_for(gpu_memory: int) -> MemoryCap | None:
    """The cap that binds on a GPU of ``gpu_memory`` bytes: the lower of the server's and the user's."""
    return lower(server_cap(), _user, gpu_memory) if gpu_memory else (_user or server_cap())


def processes_on(uuid: str) -> int:
    """How many of the notebook's processes share a GPU's cap: the kernel, and its worker and rank there."""
    return 1 + (uuid in _workers) + (uuid in _ranks)


def shares() -> dict[str, tuple[int, int, MemoryCap]]:
    """GPU UUID -> (each process's share, the cap in bytes, the cap) for every visible GPU a cap binds on."""
    found = {}
    for device in gpus.inventory().devices():
        cap = cap_for(device.memory_total or 0)
        if cap is not None and device.memory_total:
            whole = cap.on(device.memory_total)
            found[device.uuid] = (share(whole, processes_on(device.uuid)), whole, cap)
    return found


def apply() -> None:
    """Limit this kernel's allocators to its share on each GPU (lift them where no cap binds); never raises."""
    try:
        found = shares()
        devices = gpus.inventory().devices()
        limits = {d.index: found[d.uuid][0] for d in devices if d.uuid in found}
        totals = {d.index: d.memory_total for d in devices if d.memory_total}
        if limits or allocators.limits():
            allocators.limit_this_process(limits, totals)
    except (RuntimeError, ValueError, OSError) as error:  # the cell goes on; the cap is said where it is read
        dropped("limiting the kernel's GPU memory", error, once=True)


def apply_before_the_next_cell(shell: Any, *, undo: bool = False) -> None:
    """Where the server set a cap: the kernel takes its share before its next cell runs, once (``%load_ext``:
    reading the GPUs' memory is a cell's work, not the load's); ``undo`` forgets it."""
    events = getattr(shell, "events", None)
    if events is None:
        return
    with contextlib.suppress(ValueError):
        events.unregister("pre_run_cell", _before_the_cell)
    if not undo and server_cap() is not None:
        events.register("pre_run_cell", _before_the_cell)


def _before_the_cell(info: Any = None) -> None:
    apply()
    from IPython import get_ipython

    shell = get_ipython()
    if shell is not None:
        with contextlib.suppress(ValueError):
            shell.events.unregister("pre_run_cell", _before_the_cell)


def worker_share(gpu_ids: Iterable[str]) -> tuple[int, int] | None:
    """A new worker's (share, GPU memory) on the GPUs ``gpu_ids`` (``CUDA_VISIBLE_DEVICES`` entries: its own GPU
    first) once it joins the kernel there; ``None`` where no cap binds."""
    return _joining(next(iter(gpu_ids), ""), beside=_ranks)


def rank_share(gpu_id: str) -> tuple[int, int] | None:
    """A new rank's (share, GPU memory) on its GPU, once it joins the kernel and the worker there."""
    return _joining(gpu_id, beside=_workers)


def _joining(gpu_id: str, beside: set[str]) -> tuple[int, int] | None:
    """(share, GPU memory) of a process joining the kernel on ``gpu_id``, beside the helpers of ``beside``."""
    device = _device(gpu_id)
    if device is None or not device.memory_total:
        return None
    cap = cap_for(device.memory_total)
    if cap is None:
        return None
    count = 2 + (device.uuid in beside)  # the kernel, this process, the other helper there
    return share(cap.on(device.memory_total), count), device.memory_total


def workers_joined(gpu_ids: Iterable[str], client: Any) -> None:
    """A cluster of the kernel's own runs workers on ``gpu_ids``: the kernel takes its smaller share."""
    global _client
    with _lock:
        _workers.clear()
        _workers.update(d.uuid for d in map(_device, gpu_ids) if d is not None)
        _client = client
    apply()


def workers_left() -> None:
    global _client
    with _lock:
        _workers.clear()
        _client = None
    apply()


def ranks_joined(gpu_ids: Iterable[str]) -> None:
    """SPMD ranks start on ``gpu_ids``: the kernel and the workers there take their smaller shares."""
    with _lock:
        _ranks.clear()
        _ranks.update(d.uuid for d in map(_device, gpu_ids) if d is not None)
    _rebalance()


def ranks_left() -> None:
    if not _ranks:
        return
    with _lock:
        _ranks.clear()
    _rebalance()


def _rebalance() -> None:
    apply()
    client = _client
    if client is None or not _workers or getattr(client, "status", "running") != "running":
        return  # no workers of the kernel's own, or their client is closing: they go with it
    found = shares()
    if not found:
        return
    from gpu_magics.arrays.caps.worker_plugin import MemoryCapPlugin

    by_gpu = {d.cuda_id: found[d.uuid][:2] for d in gpus.inventory().devices() if d.uuid in found}
    try:
        client.register_plugin(MemoryCapPlugin(by_gpu), name=MemoryCapPlugin.name)
    except (OSError, RuntimeError, TimeoutError, ValueError) as error:  # they keep their shares until the next
        dropped("giving the workers their shares of the memory cap", error, once=True)


def _device(gpu_id: str) -> gpus.GpuDevice | None:
    for device in gpus.inventory().devices():
        if gpu_id in (device.uuid, device.cuda_id, str(device.index)):
            return device
    return None


def describe() -> str | None:
    """One line on the cap (``None`` where none binds): who set it, and each process's share."""
    found = shares()
    if not found:
        return None
    whole, cap = next(iter(found.values()))[1:]
    who = "the server's" if cap.by == "server" else "yours; %gpumemory --cap off lifts it"
    parts = []
    for device in gpus.inventory().devices():
        if device.uuid in found:
            count = processes_on(device.uuid)
            names = [
                "kernel",
                *(["worker"] if device.uuid in _workers else []),
                *(["rank"] if device.uuid in _ranks else []),
            ]
            each = (
                f"{format_bytes(found[device.uuid][0])} each to the {', '.join(names)}"
                if count > 1
                else "all to the kernel"
            )
            parts.append(f"GPU {device.index}: {each}")
    of = f"{cap.text} of its memory, " if cap.share is not None else ""
    return f"cap {format_bytes(whole)} a GPU ({of}{who}); {'; '.join(parts)}"
