"""``%config ClusterMagics.park_after`` set while a cluster runs: its idle park is armed, re-armed or disarmed at
once (as ``--idle-timeout`` on a running cluster is), said in one line. A start under way takes it once it is up."""

from __future__ import annotations

from gpu_magics.cluster.background.starting import Starting, StartProgress
from gpu_magics.cluster.control import kernel_cluster, owner
from gpu_magics.cluster.control.machine.events import SwapService
from gpu_magics.cluster.control.verbs import park
from gpu_magics.cluster.options import PROG
from gpu_magics.cluster.reading.running import ActiveCluster, Role
from gpu_magics.text.units import format_duration

SETTING = "ClusterMagics.park_after"


def apply(after_s: float) -> str | None:
    """Give the cluster in use (or the one starting, once it is up) the idle park of ``after_s`` seconds (0: none);
    the line that says so (``None``: no cluster, the next start takes it)."""
    current = kernel_cluster.in_use()
    if current is None:
        pending = kernel_cluster.under_way()
        if pending is None:
            return None
        _once_up(pending, after_s)
        return f"{PROG}: the cluster that starts now takes {SETTING} = {_said(after_s)} once it is up"
    return _rewatch(current, after_s)


def _once_up(pending: Starting, after_s: float) -> None:
    """Once the start under way ends, the cluster it brought (if any) takes the setting."""

    def heard(progress: StartProgress) -> None:
        if not progress.finished:
            return
        stop()
        current = kernel_cluster.in_use()
        if progress.phase == "ready" and current is not None:
            _rewatch(current, after_s)

    stop = pending.listen(heard)


def _rewatch(current: ActiveCluster, after_s: float) -> str:
    """Replace ``current``'s idle park with one of ``after_s`` seconds (0: none); what it does now, in one line."""
    if after_s > 0 and not current.manager.park_targets():
        new = None
        said = f"{PROG}: {current.name!r} does not park by itself: {current.manager.why_not_parkable}"
    else:
        said = _line(current, after_s)  # as it stands now: the new watch may park it at once (idle for longer)
        new = park.watch_idle(current, after_s)
    owner.post(SwapService(current, Role.IDLE_PARK, new))  # the old watch stops
    return said


def _line(current: ActiveCluster, after_s: float) -> str:
    name = repr(current.name)
    if after_s <= 0:
        return f"{PROG}: {name} no longer parks by itself ({SETTING} = 'off'; {PROG} park: now)"
    waits = f"{format_duration(after_s)} without a task ({SETTING})"
    if kernel_cluster.phase() is kernel_cluster.Phase.PARKED:
        return f"{PROG}: {name} is parked; once work resumes it, it parks again after {waits}"
    return f"{PROG}: {name} parks after {waits}, from now on ({PROG} status: the time left)"


def _said(after_s: float) -> str:
    return repr(format_duration(after_s)) if after_s > 0 else "'off'"
