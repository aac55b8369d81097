"""Writing a cluster's discovery record: what the side panel knows of it, its workers and their GPUs."""

from __future__ import annotations

import dataclasses
import functools
import os
import socket
import sys
import time
from typing import Any

from gpu_magics.cluster.control import owner
from gpu_magics.cluster.control.kernel_cluster import in_use
from gpu_magics.cluster.options import PROG
from gpu_magics.cluster.reading import cluster_state, inspection
from gpu_magics.cluster.reading.running import ActiveCluster
from gpu_magics.cluster.records import kernel_report, record
from gpu_magics.text.units import dropped, one_line

_warned = False
JOBS_REFRESH_S = 5.0  # how often a refreshed record asks the batch queue again
_jobs_read: dict[int, float] = {}  # cluster (id) -> when its record last asked the queue (monotonic)
_UNREPORTED = {"nvml_index": None, "memory_used": None, "gpu_util": None, "error": None, "others": None}


def write_record(
    current: ActiveCluster, *, refresh: bool = False, state: cluster_state.ClusterState | None = None
) -> None:
    """Write ``current``'s record (``refresh``: again, as its workers report, without waiting for the disk;
    ``state``: the verb's one read, else read here): made on this thread, written on the owner's; a failure is
    said once per kernel: the cluster works without its record."""
    try:
        if refresh and current.record is not None:  # only the members change: no round trip to the scheduler
            members = tuple(_members(current))
            reporting = sum(1 for member in members if member.get("role") == "worker")
            new_record = dataclasses.replace(
                current.record,
                members=members,
                workers=reporting or current.record.workers,
                plain_cells=current.plain_cells,
                **_idle(current),
                **_jobs(current, None),
                parked=_parked(current),
            )
            owner.change(functools.partial(_store, current, new_record, durable=False))
            return
        if state is None:
            state = cluster_state.read(current)
        infos = state.infos
        if current.gpu_ids:  # the GPUs given to the workers started here: one each, by device
            gpus = tuple(info.gpu_device or info.name for info in infos)
        else:
            gpus = tuple(info.gpu_name for info in infos if info.gpu_name)
        new_record = record.ClusterRecord(
            name=current.name,
            scheduler_address=inspection.scheduler_address(current.client),
            dashboard_url=inspection.dashboard_link(current.client),
            kind=current.kind,
            workers=len(infos),
            gpus=gpus,
            started_at=current.started_at,
            members=tuple(_members(current)),
            plain_cells=current.plain_cells,
            **_idle(current),
            **_jobs(current, state),
            **record.here(),
            parked=_parked(current),
        )
        owner.change(functools.partial(_store, current, new_record, durable=not refresh))
    except Exception as error:  # the cluster works without its record; say so once per kernel
        dropped("writing the cluster's record", error)
        global _warned
        if not _warned:
            _warned = True
            print(
                f"{PROG}: the JupyterLab side panel will not list this cluster: its record could not be "
                f"written ({one_line(error)})",
                file=sys.stderr,
            )


def _store(current: ActiveCluster, new_record: record.ClusterRecord, *, durable: bool) -> None:
    """On the owner: write ``new_record`` (read and made on the writer's thread) where ``current`` is still in
    use; a cluster let go meanwhile keeps no record."""
    if in_use() is not current:
        return
    if current.record_path is not None and current.record_path.name != new_record.filename:
        record.remove_record(current.record_path)
    current.record_path = record.write_record(new_record, durable=durable)
    current.record = new_record


def set_plain_cells(backend: str | None) -> None:
    """Say in the record of the cluster in use which session backend plain cells run on (``None``: none)."""
    current = in_use()
    if current is None or current.plain_cells == backend:
        return
    owner.change(lambda: setattr(current, "plain_cells", backend))
    if current.record is not None:
        write_record(current, refresh=True)


def _jobs(current: ActiveCluster, state: cluster_state.ClusterState | None) -> dict[str, Any]:
    """The record's manager fields; on a refresh (``state`` None) the queue is asked again at most every
    ``JOBS_REFRESH_S`` seconds."""
    manager = current.manager
    facts = current.facts.to_json()  # as far as it learnt what workers it has
    if manager.label is None:  # a cluster started here or attached to: no jobs to read
        return {"manager": None, "jobs": (), "adaptive": manager.adaptive, "facts": facts}
    fields: dict[str, Any] = {
        "manager": manager.label,
        "adaptive": manager.adaptive,
        "up_since": manager.since,
        "facts": facts,
    }
    previous = current.record
    if state is None and previous is not None and time.monotonic() - _jobs_read.get(id(current), 0.0) < JOBS_REFRESH_S:
        fields["jobs"] = previous.jobs
        return fields
    if state is None:
        workers = inspection.scheduler_workers(current.client)
        state = cluster_state.read(current, workers)
    _jobs_read[id(current)] = time.monotonic()
    fields["jobs"] = tuple(job.to_json() for job in cluster_state.with_gpus(state.jobs, state.infos))
    return fields


def _idle(current: ActiveCluster) -> dict[str, Any]:
    watcher = current.idle
    if watcher is None:
        return {"idle_timeout": None, "idle_since": None}
    return {"idle_timeout": watcher.timeout, "idle_since": watcher.idle_since}


def _parked(current: ActiveCluster) -> dict[str, Any] | None:
    """Its park (``running.Parked``) as the record says it: since when, the GPU memory its workers gave back (held
    in host memory meanwhile) and how many; ``None`` where it is not parked."""
    parked = current.parked
    if parked is None:
        return None
    return {"since": parked.since, "bytes": parked.released, "workers": len(parked.processes)}


def _members(current: ActiveCluster) -> list[dict[str, Any]]:
    members = current.telemetry.members_json() if current.telemetry is not None else []
    kernel = _kernel_member()
    return [*members, kernel] if kernel is not None else members


def _kernel_member() -> dict[str, Any] | None:
    """The kernel's own GPU memory (arrays, its pool's cache, its context), as a record member; ``None`` when it
    holds none."""
    held = kernel_report.kernel_memory()
    if not held:
        return None
    return {
        "name": "kernel",
        "address": "",
        "host": "127.0.0.1",
        "host_label": socket.gethostname(),
        "pid": os.getpid(),
        "role": "kernel",
        "gpus": [{**gpu.to_json(), **_UNREPORTED} for gpu in held],
        "time": time.time(),
    }
