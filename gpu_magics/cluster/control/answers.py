"""In the kernel: what the verbs that change nothing answer about the cluster in use: its ``status`` (fetched from
its scheduler; while it starts, as far as it got, without waiting), its ``dashboard_url``, and the cluster a verb
needs (``require_active``: one in use, its start settled; ``require_owned``: one this kernel started).
The verbs (``verbs``) answer with these; nothing here imports them."""

from __future__ import annotations

import time

from gpu_magics.cluster.control import owner
from gpu_magics.cluster.control.kernel_cluster import in_use
from gpu_magics.cluster.control.queries import no_cluster_message, settle_start, start_under_way
from gpu_magics.cluster.dashboard import links
from gpu_magics.cluster.info import ClusterInfo
from gpu_magics.cluster.options import PROG
from gpu_magics.cluster.reading import cluster_state, inspection
from gpu_magics.cluster.reading.running import ActiveCluster, Parked
from gpu_magics.text.errors import NoCluster, NotOurs
from gpu_magics.text.units import format_bytes, format_clock


def status(notice: str | None = None) -> ClusterInfo:
    """The state of the cluster in use, fetched from its scheduler (while it starts: as far as it got, without
    waiting); ``NoCluster`` when there is none."""
    pending = start_under_way()
    progress = None if pending is None else pending.progress()
    current = in_use() if progress is not None else require_active("status")
    if current is None:
        raise NoCluster(f"{PROG} status: {no_cluster_message()}")
    if progress is not None:
        notice = notice or progress.line()
    elif current.parked is not None:
        notice = notice or parked_line(current, current.parked)
    elif current.telemetry is not None:  # figures from after this call (a cell's pool is not a second old)
        current.telemetry.wait_reports_after(time.time(), timeout=current.telemetry.interval + 0.2)
    workers = inspection.scheduler_workers(current.client)
    devices = {name: dict(seen) for name, seen in current.devices.items()}
    current.manager.learn(current.client, devices, set(workers))  # workers that came since: what they say
    if devices != current.devices:
        owner.replace_figures(current, devices=devices)
    if not workers and notice is None:
        bounds = current.manager.adaptive
        if bounds is not None and bounds[1] > 0:
            fix = f"it adapts between {bounds[0]} and {bounds[1]}: workers start when tasks wait"
        elif current.owned:
            fix = f"{PROG} scale N adds some, {PROG} --replace starts a new cluster"
        else:
            fix = "start some"
        notice = f"{PROG}: the cluster has no workers: {fix}"
    return cluster_state.describe(current, cluster_state.read(current, workers), notice=notice)


def parked_line(current: ActiveCluster, parked: Parked) -> str:
    """``%gpucluster status``'s line for a parked cluster: since when, what it gave back, what resumes it."""
    count = len(parked.processes)
    return (
        f"{PROG}: {current.name!r} is parked since {format_clock(parked.since, time.time())}: {count} worker"
        f"{'s' if count != 1 else ''} gave {format_bytes(parked.released)} of GPU memory back to the server, kept in "
        f"host memory meanwhile; the next cell that sends it work resumes {'them' if count != 1 else 'it'} "
        f"({PROG} resume: now)"
    )


def dashboard_url() -> str | None:
    """The dashboard link of the cluster in use, as the browser can open it (through jupyter-server-proxy
    under JupyterHub; ``None`` when it has none); ``UsageError`` without a cluster."""
    return links.for_kernel(inspection.dashboard_link(require_active("dashboard").client)).url


def require_active(action: str) -> ActiveCluster:
    """The cluster in use, once a start under way is done (its failure is this verb's one line)."""
    settle_start()
    current = in_use()
    if current is None:
        raise NoCluster(f"{PROG} {action}: {no_cluster_message()}")
    return current


def require_owned(action: str, *, scalable: bool = False) -> ActiveCluster:
    """The cluster in use, if this kernel started it (``scalable``: or it came from a manager object)."""
    current = require_active(action)
    if not (current.scalable if scalable else current.owned):
        raise NotOurs(
            f"{PROG} {action}: this kernel attached to {current.options.address or current.name} and did not start "
            f"it, so it does not {action} its workers; do that where it was started"
        )
    return current


def list_gateway_clusters(address: str | None) -> str:
    """``--gateway --list``: the user's clusters on the gateway (the one in use here marked)."""
    from gpu_magics.cluster.managers.gateway.listing import list_clusters
    from gpu_magics.cluster.managers.gateway.manager import GatewayManager

    current = in_use()
    manager = current.manager if current is not None else None
    return list_clusters(address, manager.name if isinstance(manager, GatewayManager) else None)
