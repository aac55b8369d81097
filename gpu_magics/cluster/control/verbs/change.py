"""``%gpucluster restart``, ``scale`` and ``adapt``. Restarting and scaling the cluster in use are changes under way
(``ChangeAsked``, ``ChangeEnded``), as a start is: in a notebook the prompt comes back at once, a line shows the
workers come back, and cells that need the cluster wait for them; elsewhere (and in ``restart()``, ``scale()``)
they run here. ``adapt`` asks the workers (``AdaptAsked``: a parked cluster resumes first)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import cast

from gpu_magics.cluster.background import start_logs
from gpu_magics.cluster.background.starting import Starting
from gpu_magics.cluster.control import kernel_cluster, lifecycle, owner, steps
from gpu_magics.cluster.control.answers import require_owned, status
from gpu_magics.cluster.control.machine import events
from gpu_magics.cluster.control.machine.events import ChangeAsked, ChangeEnded
from gpu_magics.cluster.control.machine.phase import PhaseRefused
from gpu_magics.cluster.control.machine.table import require
from gpu_magics.cluster.control.verbs import resume
from gpu_magics.cluster.info import ClusterInfo
from gpu_magics.cluster.managers.local import factories
from gpu_magics.cluster.options import PROG
from gpu_magics.cluster.reading import inspection
from gpu_magics.cluster.reading.running import ActiveCluster
from gpu_magics.text.errors import ClusterError, StartFailed
from gpu_magics.text.units import dropped, one_line


def restart() -> ClusterInfo:
    """Restart every worker process of the cluster started here (frees their memory), then warm them again."""
    return cast(ClusterInfo, begin_restart().wait())


def begin_restart(*, background: bool = False, listen: Callable[[Starting], None] | None = None) -> Starting:
    """``restart`` as a change under way (``background``: in a thread; ``listen`` gets its handle first)."""
    from gpu_magics.cluster.workers import warmup

    current = require_owned("restart")

    def job(change: Starting) -> ClusterInfo:
        # no lock across the network waits: a stop meanwhile closes the cluster at once, and this job then ends
        # as stopped (the restart's failure against a closed cluster is no news)
        began = time.perf_counter()
        with start_logs.during_start(current.manager.background):
            try:
                with factories.worker_start_config():
                    current.client.restart(timeout=current.options.start_timeout, wait_for_workers=True)
            except Exception as error:  # whatever distributed's restart raises is the user's one line
                change.check()
                dropped("restarting the workers", error)
                raise StartFailed(f"{PROG} restart: {one_line(error)}") from error
            change.check()
            ready_s = time.perf_counter() - began
            change.update(joined=change.expected)
            devices, warm_s = warmup.warm_workers(current.client, current.manager.workers_kind(current.devices))

        def restarted() -> None:  # on the owner: a stop asked meanwhile came first, and this ends as stopped
            change.check()
            owner.replace_figures(current, devices=devices, ready_s=ready_s, warm_s=warm_s)

        owner.change(restarted)
        return status(notice=f"{PROG}: restarted {current.name!r}")

    return _change(current, "restarting", len(inspection.scheduler_workers(current.client)), job, background, listen)


def scale(count: int) -> ClusterInfo:
    """Grow or shrink the cluster started here to ``count`` workers (at most one per chosen GPU)."""
    return cast(ClusterInfo, begin_scale(count).wait())


def begin_scale(count: int, *, background: bool = False, listen: Callable[[Starting], None] | None = None) -> Starting:
    """``scale`` as a change under way (``background``: in a thread; ``listen`` gets its handle first)."""
    current = require_owned("scale", scalable=True)
    current.manager.check_scale(count, "scale")  # a count it cannot have: this line's error, at once

    def job(change: Starting) -> ClusterInfo:
        try:
            notice = steps.scale(current, count)  # no lock across its network waits: a stop answers meanwhile
        finally:  # stopped meanwhile: the scale's failure (any, else re-raised) against a closed cluster is no news
            change.check()
        owner.change(change.check)  # a stop asked meanwhile came first: this ends as stopped
        return lifecycle.written_status(current, notice or f"{PROG}: scaled {current.name!r} to {count} worker(s)")

    return _change(current, "scaling", count, job, background, listen)


def adapt(minimum: int, maximum: int) -> ClusterInfo:
    """Let the cluster grow when tasks wait and shrink when idle, between ``minimum`` and ``maximum`` workers."""
    current = require_owned("adapt", scalable=True)
    resume.asking_workers(events.AdaptAsked(current), "adapt")
    return lifecycle.written_status(current, steps.adapt(current, minimum, maximum))


_VERBS = {"restarting": "restart", "scaling": "scale"}  # the verb a change's line names, by what it says it does


def _change(
    current: ActiveCluster,
    verb: str,
    expected: int,
    job: Callable[[Starting], ClusterInfo],
    background: bool,
    listen: Callable[[Starting], None] | None,
) -> Starting:
    """Run ``job`` as a change of ``current``'s workers that cells needing the cluster wait for, as for a start;
    in a thread where ``background`` and the cluster was started here."""
    words = {"gpu": "GPU workers", "cpu": "CPU workers"}.get(current.workers_kind, "workers")
    changing = Starting(PROG, current.name, expected, words, verb)
    scheduler = inspection.local_scheduler(current.client)
    if scheduler is not None:
        changing.counting(lambda: len(scheduler.workers))
    try:  # decided on the owner: the cluster is still in use, and nothing else changes it
        answer = owner.post(ChangeAsked(changing, current))
        if resume.resumed_first(answer):  # parked: its workers run again first
            answer = owner.post(ChangeAsked(changing, current))
        require(answer)
    except PhaseRefused:
        raise ClusterError(
            f"{PROG} {_VERBS[verb]}: {current.name!r} is not ready for it (it is "
            f"{kernel_cluster.phase().value}); wait for it, then run this again"
        ) from None
    if listen is not None:
        listen(changing)

    def run(change: Starting) -> ClusterInfo:
        try:
            return job(change)
        finally:  # done or failed, the cluster stays in use; stopped meanwhile, the stop said it
            owner.post(ChangeEnded(change))

    if background and current.manager.background:
        changing.run_in_background(run)
    else:
        changing.run_here(run)
    return changing
