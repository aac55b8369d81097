"""Letting the cluster in use go, below ``lifecycle``'s ``stop``: on the owner thread it stops being in use
(``take_out``, ``forget_start``, ``forget_record``); off it, what taking it into use started ends and its client
closes (``release``, which waits for threads and the network)."""

from __future__ import annotations

import asyncio
import functools
from typing import Any

from IPython.core.error import UsageError

from gpu_magics.cluster.background.starting import Starting
from gpu_magics.cluster.control import owner
from gpu_magics.cluster.control.kernel_cluster import in_use, set_in_use, set_starting
from gpu_magics.cluster.options import PROG
from gpu_magics.cluster.reading.running import ActiveCluster
from gpu_magics.cluster.records import record
from gpu_magics.text.units import dropped


def forget_start(pending: Starting) -> None:
    """On the owner: a stopped start is not under way any more, nor its cluster in use, whatever its job does."""
    set_starting(None)
    current = in_use()
    if current is not None and current.name == pending.name:
        set_in_use(None)


def take_out(pending: Starting | None, keep: bool, only: ActiveCluster | None) -> ActiveCluster | None:
    """On the owner: the cluster ``stop`` closes, no longer in use (``None``: there is none, or not ``only``)."""
    if pending is not None:
        set_starting(None)  # a failed start: stop is the answer to it
    current = in_use()
    if current is None or (only is not None and current is not only):
        return None
    if keep and not (current.manager is not None and current.manager.keepable):
        raise UsageError(
            f"{PROG} stop --keep: only a gateway cluster outlives its kernel; {PROG} stop closes {current.name!r}"
        )
    set_in_use(None)
    return current


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
    owner.change(lambda: set_in_use(None) if in_use() is current else None)
    if current.idle is not None:
        current.idle.stop()
    if current.refresher is not None:
        current.refresher.stop()
    owner.change(functools.partial(forget_record, current))
    if current.telemetry is not None:
        # an attached cluster may serve other kernels too, which the plugin also reports to: it stays
        current.telemetry.close(unregister=False)
    try:
        current.client.close(timeout=5)
    except Exception as error:  # a close that fails any way: the cluster is let go all the same
        dropped("closing the client", error)


def forget_record(current: ActiveCluster) -> None:
    """On the owner: the record goes, and dask's settings come back as they were before ``current``."""
    record.remove_record(current.record_path)
    if current.saved_config is not None:
        import dask

        dask.config.set(current.saved_config)
        current.saved_config = None
