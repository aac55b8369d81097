"""The lifecycle's one start and one scale skeleton, the same for every manager (``base.ClusterManager``):
connect (``start``), then, once the start's job took the cluster into use, wait for the workers, learn their GPUs,
warm them (``come``, in ``undone_on_failure``); ask for more or fewer, wait, learn and warm the new
ones. ``adapt MIN MAX`` through the manager's own ``adapt()`` (SLURM jobs leave the queue when idle; a cluster
started here uses distributed's ``Adaptive``). Letting a cluster go, which the owner already took out of use
(``release``: what taking it into use started ends and its client closes, off the owner: it waits for threads and
the network; ``forget_record``, on the owner: its record goes and dask's settings come back)."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, NoReturn

from IPython.core.error import UsageError

from gpu_magics.arrays.caps import notebook
from gpu_magics.cluster.background.starting import StartCancelled, Starting
from gpu_magics.cluster.control import owner
from gpu_magics.cluster.managers.base import ClusterManager
from gpu_magics.cluster.options import PROG, ClusterOptions
from gpu_magics.cluster.reading import inspection
from gpu_magics.cluster.reading.running import ActiveCluster
from gpu_magics.cluster.records import record
from gpu_magics.text.errors import NotOurs, StartFailed
from gpu_magics.text.units import dropped, one_line

if TYPE_CHECKING:
    from distributed import Client


def start(manager: ClusterManager, options: ClusterOptions, starting: Starting) -> ActiveCluster:
    """The cluster ``manager`` gives, once its scheduler answers (not in use yet: the start's job posts that);
    ``starting`` hears how far it got. A failure (or ``starting``'s cancel) closes what this made (SLURM: its jobs
    leave the queue); a failure is one ``UsageError`` line."""
    clients: list[Client] = []
    with _undone(manager, options.cluster_name, None, clients):
        clients.append(manager.start(options, starting))
        quiet_abandoned_gathers(getattr(clients[0].loop, "asyncio_loop", None))
        starting.check()
    started = ActiveCluster(
        name=options.cluster_name,
        kind=options.kind,
        options=options,
        client=clients[0],
        manager=manager,
        cluster=manager._local_cluster,
        gpu_ids=getattr(manager, "gpu_ids", ()),
    )
    if started.gpu_ids:  # the kernel's share of a memory cap shrinks: its workers take theirs
        notebook.workers_joined(started.gpu_ids, started.client)
    return started


def undone_on_failure(started: ActiveCluster) -> contextlib.AbstractContextManager[None]:
    """A failure inside (or ``Starting``'s cancel) releases ``started`` (``release``) and closes what its start made;
    it is raised again, as one ``UsageError`` line where it is not one."""
    return _undone(started.manager, started.name, started, [started.client])


@contextlib.contextmanager
def _undone(manager: ClusterManager, name: str, started: ActiveCluster | None, clients: list[Client]) -> Iterator[None]:
    try:
        yield
    except BaseException as error:  # the clean-up runs for any failure; re-raised, as one line where it is not one
        _failed(manager, started, clients[0] if clients else None, name, error)


def come(started: ActiveCluster, began: float, starting: Starting) -> str | None:
    """Once ``started`` is in use (plain cells use its client: their tasks wait for the workers): wait for its
    workers, learn their GPUs, warm them; returns what they still wait for (``None``: they all came). ``ready_s``
    counts from ``began`` (the magic's start) until the workers answered, ``warm_s`` from then until they are warm."""
    manager, client, options = started.manager, started.client, started.options
    starting.in_use.set()
    starting.update(phase="workers")
    notice = manager.await_workers(client, options, starting)
    starting.check()
    ready_s = time.perf_counter() - began
    workers = inspection.scheduler_workers(client)
    devices: dict[str, dict[str, Any]] = {}
    manager.learn(client, devices, set(workers))
    owner.replace_figures(started, devices=dict(devices), ready_s=ready_s)
    seen = manager._warm(client, options, devices, starting) if workers else None
    if seen is not None:
        _merge(devices, seen)
        owner.replace_figures(started, devices=devices, warm_s=time.perf_counter() - began - ready_s)
    starting.check()
    return notice


def _failed(
    manager: ClusterManager, started: ActiveCluster | None, client: Client | None, name: str, error: BaseException
) -> NoReturn:
    dropped("the start", error)
    if started is not None:
        release(started)
    _end_failed(manager, client, name)
    if isinstance(error, (UsageError, KeyboardInterrupt, SystemExit, StartCancelled)):
        raise error
    raise StartFailed(f"{PROG}: {manager._start_words}: {one_line(error)}") from error


def _end_failed(manager: ClusterManager, client: Client | None, name: str) -> None:
    """After a failed start: close its client, then end the manager (closing what it made where it is ours)."""
    closes: list[tuple[str, Callable[[], object]]] = []
    if client is not None:
        closes.append(("the client", functools.partial(client.close, timeout=5)))
    closes.append(("the manager", functools.partial(manager.finish, name)))
    for what, close in closes:
        try:
            close()
        except Exception as error:  # a close that fails any way: the start's own error is what the user sees
            dropped(f"closing {what} of a failed start", error)


def scale(current: ActiveCluster, count: int) -> str | None:
    """``scale`` through the manager; waits for the workers and warms the new ones; returns what still waits
    (``None``: every worker came)."""
    from gpu_magics.cluster.workers import warmup

    manager = current.manager
    manager.check_scale(count, "scale")
    before = set(inspection.scheduler_workers(current.client))
    try:
        notice = manager.scale(current.client, count, current.options)
    except UsageError:
        raise
    except (OSError, RuntimeError, ValueError) as error:  # the scheduler silent, its loop gone, a count refused
        dropped("scaling the cluster", error)  # (anything else is the change's own one line: ``Starting``)
        raise StartFailed(f"{PROG} scale {count}: {one_line(error)}") from None
    workers = inspection.scheduler_workers(current.client)
    names = {str(info.get("name", address)) for address, info in workers.items()}
    devices = {name: dict(seen) for name, seen in current.devices.items() if name in names}
    owner.replace_figures(current, devices=dict(devices))
    new = sorted(set(workers) - before)
    if new:
        manager.learn(current.client, devices, set(new))
        try:
            seen, warm_s = warmup.warm_workers(current.client, manager.workers_kind(devices), workers=new)
            _merge(devices, seen)
            owner.replace_figures(current, devices=devices, warm_s=warm_s)
        except Exception as error:  # a courtesy: the scale stands without it
            dropped("warming the new workers", error)
            owner.replace_figures(current, devices=devices)
    return notice


def _merge(devices: dict[str, dict[str, Any]], seen: dict[str, dict[str, Any]]) -> None:
    """Add what the warm-up saw on each worker to what it said about its GPUs."""
    for name, found in seen.items():
        devices[name] = {**devices.get(name, {}), **found}


def adapt(current: ActiveCluster, minimum: int, maximum: int) -> str:
    """Have ``current`` adapt between ``minimum`` and ``maximum`` workers; says so in one line."""
    manager = current.manager
    manager.check_scale(maximum, "adapt")
    try:
        manager.adapt(minimum, maximum)
    except Exception as error:  # whatever the library raises is the user's one line
        dropped("adapting the cluster", error)
        raise StartFailed(f"{PROG} adapt: {one_line(error)}") from None
    return f"{PROG}: {current.name!r} adapts between {minimum} and {maximum} workers"


def quiet_abandoned_gathers(loop: Any) -> None:
    """On the client's event loop (``None``: nothing to do), drop asyncio's report of a future left by an
    interrupted ``gather``: it ends with distributed's ``AllExit``, nobody reads it, and asyncio would print it
    later into the notebook as "Task exception was never retrieved" with its traceback. Every other report goes on
    as before. Never raises."""
    if loop is None:
        return
    try:
        from distributed.client import AllExit
    except ImportError:
        return
    try:
        previous = loop.get_exception_handler()
        if getattr(previous, "_gpu_magics_quiet", False):  # the kernel's clients share one loop: once is enough
            return

        def handler(event_loop: Any, context: dict[str, Any]) -> None:
            if isinstance(context.get("exception"), AllExit):
                return
            if previous is not None:
                previous(event_loop, context)
            else:
                event_loop.default_exception_handler(context)

        handler._gpu_magics_quiet = True  # type: ignore[attr-defined]
        loop.set_exception_handler(handler)
    except AttributeError:  # a loop without asyncio's exception handlers
        pass


def refuse_keep(current: ActiveCluster) -> None:
    """A ``stop --keep`` of ``current``, refused (nothing changed): only a gateway cluster outlives its kernel."""
    raise NotOurs(
        f"{PROG} stop --keep: only a gateway cluster outlives its kernel; {PROG} stop closes {current.name!r}"
    )


def kept_on_workers(client: Any) -> int:
    """How many results the notebook keeps on the workers (persisted chunks, futures): the client's futures once
    the releases of those already dropped (queued on its event loop) have run."""
    try:
        client.sync(asyncio.sleep, 0)
        return len(client.futures)
    except (OSError, RuntimeError):  # the scheduler's comm failed or timed out; the client's loop is gone
        return 0


def release(current: ActiveCluster) -> None:
    """Stop using ``current``: undo what taking it into use did (idle watch, record, telemetry, dask settings)
    and close its client; its manager is left to the caller. Off the owner: it waits for threads and the network."""
    for service in current.services():  # an attached cluster's telemetry plugin stays: other kernels listen too
        service.stop()
    if current.gpu_ids:
        notebook.workers_left()
    owner.change(functools.partial(forget_record, current))
    try:
        current.client.close(timeout=5)
    except (OSError, RuntimeError, TimeoutError) as error:  # the scheduler silent or gone, its loop closed: let go
        dropped("closing the client", error)


def forget_record(current: ActiveCluster) -> None:
    """On the owner: the record goes, and dask's settings come back as they were before ``current``."""
    record.remove_record(current.record_path)
    if current.saved_config is not None:
        import dask

        dask.config.set(current.saved_config)
        current.saved_config = None
