"""Letting a cluster go, below ``lifecycle``'s ``stop`` (which the owner already took it out of use for): what
taking it into use started ends and its client closes (``release``, which waits for threads and the network); on
the owner, its record goes and dask's settings come back (``forget_record``)."""

from __future__ import annotations

import asyncio
import functools
from typing import Any

from gpu_magics.cluster.control import owner
from gpu_magics.cluster.options import PROG
from gpu_magics.cluster.reading.running import ActiveCluster
from gpu_magics.cluster.records import record
from gpu_magics.text.errors import NotOurs
from gpu_magics.text.units import dropped


def check_keep(current: ActiveCluster) -> None:
    """On the owner, before a ``stop --keep`` takes ``current`` out: only a gateway cluster outlives its kernel."""
    if not current.manager.keepable:
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
    if current.idle is not None:
        current.idle.stop()
    if current.idle_park is not None:
        current.idle_park.stop()
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
