"""The lifecycle's steps for a cluster whose workers come from a manager (``--slurm``, ``--from``): start
(connect, wait for the workers, learn their GPUs, warm them) and scale, through ``base.ClusterManager``; and
``adapt MIN MAX`` for any cluster that scales: through its manager's own ``adapt()`` (SLURM jobs leave the
queue when idle) or, for a cluster started here, distributed's ``Adaptive`` on it."""

from __future__ import annotations

import contextlib
import time
from typing import TYPE_CHECKING, Any

from IPython.core.error import UsageError

from gpu_magics.cluster import attach, inspection
from gpu_magics.cluster.active import ActiveCluster
from gpu_magics.cluster.inspection import one_line
from gpu_magics.cluster.options import PROG, ClusterOptions
from gpu_magics.cluster.queries import worker_kind

if TYPE_CHECKING:
    from distributed import Client


def start(options: ClusterOptions, namespace: dict[str, Any], began: float) -> tuple[ActiveCluster, str | None]:
    """The cluster ``options`` ask for, and what its workers still wait for (``None``: they all came). Waits
    up to ``--wait`` seconds for the workers. A failure closes what this made (SLURM: its jobs leave the
    queue) and is one ``UsageError`` line."""
    from gpu_magics.cluster.managers.opening import open_manager
    from gpu_magics.cluster.workers import warmup

    manager = open_manager(options, namespace)
    client: Client | None = None
    try:
        client = attach.connect_manager(manager.cluster, options.start_timeout)
        notice = manager.wait_for_workers(client, options.start_wait)
        ready_s = time.perf_counter() - began
        devices: dict[str, dict[str, Any]] = {}
        workers = inspection.scheduler_workers(client)
        attach.learn_gpus(client, devices, set(workers))
        warm_s = None
        if workers:
            gpu = any(seen.get("gpu_name") for seen in devices.values())
            seen, _ = warmup.warm_workers(client, "gpu" if gpu else "cpu")
            _merge(devices, seen)
            warm_s = time.perf_counter() - began - ready_s
    except BaseException as error:
        if client is not None:
            with contextlib.suppress(Exception):
                client.close(timeout=5)
        manager.abandon()
        if isinstance(error, (UsageError, KeyboardInterrupt, SystemExit)):
            raise
        raise UsageError(f"{PROG}: the cluster did not start: {one_line(error)}") from error
    started = ActiveCluster(
        name=options.cluster_name,
        kind=options.kind,
        options=options,
        client=client,
        cluster=None,
        manager=manager,
        devices=devices,
        ready_s=ready_s,
        warm_s=warm_s,
    )
    return started, notice


def scale(current: ActiveCluster, count: int) -> str | None:
    """``scale`` through the manager's own ``scale()``; waits ``--wait`` seconds and warms the new workers;
    returns what still waits (``None``: every worker came)."""
    from gpu_magics.cluster.workers import warmup

    assert current.manager is not None
    before = set(inspection.scheduler_workers(current.client))
    try:
        current.manager.scale(count)
        notice = current.manager.wait_for_workers(current.client, current.options.start_wait, count)
    except UsageError:
        raise
    except Exception as error:
        raise UsageError(f"{PROG} scale {count}: {one_line(error)}") from None
    new = sorted(set(inspection.scheduler_workers(current.client)) - before)
    if new:
        attach.learn_gpus(current.client, current.devices, set(new))
        with contextlib.suppress(Exception):
            seen, current.warm_s = warmup.warm_workers(current.client, worker_kind(current), workers=new)
            _merge(current.devices, seen)
    return notice


def _merge(devices: dict[str, dict[str, Any]], seen: dict[str, dict[str, Any]]) -> None:
    """Add what the warm-up saw on each worker to what it said about its GPUs."""
    for name, found in seen.items():
        devices[name] = {**devices.get(name, {}), **found}


def adapt(current: ActiveCluster, minimum: int, maximum: int) -> str:
    """Have ``current`` adapt between ``minimum`` and ``maximum`` workers; says so in one line."""
    if current.kind == "gpu" and maximum > len(current.gpu_ids):
        raise UsageError(
            f"{PROG} adapt: the cluster may use {len(current.gpu_ids)} GPU(s), one worker each; give at most "
            f"{len(current.gpu_ids)}"
        )
    try:
        if current.manager is not None:
            current.manager.adapt(minimum, maximum)
        else:
            assert current.cluster is not None
            current.cluster.adapt(minimum=minimum, maximum=maximum)
            current.adaptive = (minimum, maximum)
    except Exception as error:
        raise UsageError(f"{PROG} adapt: {one_line(error)}") from None
    return f"{PROG}: {current.name!r} adapts between {minimum} and {maximum} workers"
