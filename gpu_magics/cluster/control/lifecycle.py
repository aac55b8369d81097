"""The lifecycle of the one cluster a kernel uses: start (in the background or here) or attach, scale, restart, stop.

``%gpucluster`` drives it; ``gpurun`` asks ``queries``. Nothing here touches a GPU at import. Everything binds to
127.0.0.1 unless ``--host`` says otherwise; clusters started here close on ``stop``, ``%unload_ext`` and
interpreter exit. Every way to get workers is a manager behind ``managers``' one interface, so each verb here is
one call on the manager in use, with no branch on the kind of cluster.
"""

from __future__ import annotations

import atexit
import functools
import time
from collections.abc import Callable
from typing import Any, cast

from gpu_magics.arrays import dask_settings
from gpu_magics.cluster.background import idle, start_logs
from gpu_magics.cluster.background.closing import Closing
from gpu_magics.cluster.background.starting import StartCancelled, Starting, StartProgress
from gpu_magics.cluster.control import kernel_cluster, owner, parking, record_writer, steps
from gpu_magics.cluster.control.answers import (
    dashboard_url,
    list_gateway_clusters,
    require_active,
    require_owned,
    status,
)
from gpu_magics.cluster.control.machine import events
from gpu_magics.cluster.control.machine.table import Phase, require
from gpu_magics.cluster.control.queries import (
    active,
    active_client,
    describe_hardware,
    gpu_worker_devices,
    has_gpu_workers,
    require_client,
    settle_start,
    split_workers_by_gpu,
    start_under_way,
    telemetry,
    worker_count,
)
from gpu_magics.cluster.info import ClusterInfo
from gpu_magics.cluster.managers.base import ClusterManager
from gpu_magics.cluster.managers.opening import make_manager, refuse_another
from gpu_magics.cluster.options import PROG, ClusterOptions
from gpu_magics.cluster.reading import cluster_state
from gpu_magics.cluster.reading.running import ActiveCluster
from gpu_magics.cluster.records import kernel_report
from gpu_magics.cluster.records.refresh import RecordRefresher
from gpu_magics.cluster.telemetry.collector import start_collecting
from gpu_magics.cluster.workers import forkserver
from gpu_magics.text.errors import ServiceError
from gpu_magics.text.units import dropped, one_line

# The lifecycle's own verbs, and the answers given here too (``queries``; ``reading.answers``: status, dashboard, the
# cluster a verb requires): the magic and scripts ask this module, while ``gpurun`` asks ``cluster.queries`` only.
__all__ = [
    "active",
    "active_client",
    "adapt",
    "begin",
    "dashboard_url",
    "describe_hardware",
    "free_workers",
    "gpu_worker_devices",
    "has_gpu_workers",
    "list_gateway_clusters",
    "prestart_processes",
    "require_active",
    "require_client",
    "require_owned",
    "split_workers_by_gpu",
    "start",
    "start_progress",
    "start_under_way",
    "status",
    "stop",
    "telemetry",
    "unreported_start_failure",
    "worker_count",
]

DEFAULT_TELEMETRY_INTERVAL = 1.0  # seconds between the GPU reports of each worker
RECORD_REFRESH_S = 2.0  # how often the discovery record takes in new telemetry (the side panel's view)
STOP_WAIT_S = 1.5  # how long stop waits for a start under way to close what it made; then it goes on closing alone

NO_CLUSTER = f"{PROG}: no cluster is running"  # what stop says when it found nothing to stop
WOUND_DOWN_WAIT_S = 30.0  # how long a new start waits for a stopped one to finish closing what it made

_atexit_registered = False
_ALIVE = ("running", "connecting")  # a client whose scheduler answers, or was answering and is reconnecting


def start(
    options: ClusterOptions,
    telemetry_interval: float = DEFAULT_TELEMETRY_INTERVAL,
    idle_timeout: float = 0.0,
    namespace: dict[str, Any] | None = None,
    park_after: float = 0.0,
) -> ClusterInfo:
    """Start (or attach to) a cluster as ``options`` say, and return once every worker is up and warm (``begin``
    returns once the start is under way); an interrupt stops the start."""
    handle = begin(options, telemetry_interval, idle_timeout, namespace, park_after=park_after)
    return cast(ClusterInfo, handle.wait())


def begin(
    options: ClusterOptions,
    telemetry_interval: float = DEFAULT_TELEMETRY_INTERVAL,
    idle_timeout: float = 0.0,
    namespace: dict[str, Any] | None = None,
    *,
    background: bool = False,
    listen: Callable[[Starting], None] | None = None,
    park_after: float = 0.0,
) -> Starting:
    """Start (or attach to) a cluster as ``options`` say (reusing a running one unless ``options.replace``); with
    ``background``, a cluster started here starts in a thread and this returns at once (cells that need it wait).
    Returns the start's handle (``info``: the status once ready); ``listen`` gets it before it runs. Workers
    report their GPUs every ``telemetry_interval`` s (0: never); after ``idle_timeout`` s without a task (0:
    never) the cluster closes (attached, adopted: detached); after ``park_after`` s (0: never) its GPU workers park.
    ``namespace``: where ``--from NAME`` looks. What it does is decided from the phase (``_decide``)."""
    began = time.perf_counter()
    manager = make_manager(options, namespace or {})  # nothing happens yet: it only keeps the line's choices
    handle = _decide(manager, options, idle_timeout, None)
    if handle.manager is not manager:  # the start, restart or scale under way, or the cluster in use, reused
        return handle
    if listen is not None:
        listen(handle)
    job = functools.partial(_start_job, manager, options, began, telemetry_interval, (idle_timeout, park_after))
    if background and manager.background:
        handle.run_in_background(job)
    else:
        handle.run_here(job)
    return handle


def _decide(manager: ClusterManager, options: ClusterOptions, idle_timeout: float, opened_for: bool | None) -> Starting:
    """From one view: reuse what runs or starts, stop it first (dead, or ``--replace``), or begin this start
    (``StartAsked``); after a stop, or a view that changed meanwhile (``LookAgain``), it decides again. The line is
    checked (``open``, for what ``opened_for`` says) before anything stops: a bad line leaves what runs running."""
    seen = owner.view()
    current = seen.cluster
    running = seen.pending or current
    reuse = running is not None and not options.replace
    dead = current is not None and seen.phase is Phase.IN_USE and current.client.status not in _ALIVE
    if not dead and opened_for is not reuse:
        manager.open(reuse=reuse)
        opened_for = reuse
    if dead or (running is not None and not reuse):
        stop(only=current if dead else None)  # died under us: clean up; --replace: what runs closes first
        return _decide(manager, options, idle_timeout, opened_for)
    if seen.pending is not None:  # a start, restart or scale under way: the cluster this asks for
        by = seen.pending.manager or (None if current is None else current.manager)
        refuse_another(manager, options, by, None, seen.pending.name)
        manager.finish(options.cluster_name, keep=True)  # what it opened (a gateway's client) is let go
        return seen.pending
    if current is not None:
        return _reuse(manager, options, current, idle_timeout)
    if seen.winding is not None:  # its release puts dask's settings back: before this start makes its own
        seen.winding.finished.wait(WOUND_DOWN_WAIT_S)
    handle = Starting(
        PROG, options.cluster_name, manager.expected_workers() or options.cpu_workers or 0, manager.workers_words
    )
    handle.manager = manager
    if not events.accepted(require(owner.post(events.StartAsked(handle, seen.generation)))):
        return _decide(manager, options, idle_timeout, opened_for)  # something began or stopped since ``seen``
    return handle


def _reuse(manager: ClusterManager, options: ClusterOptions, current: ActiveCluster, idle_timeout: float) -> Starting:
    """The line asks for the cluster in use (or names none): it is used (with a new idle timeout where the line
    gave one); a line naming another is refused."""
    address = getattr(current.client.scheduler, "address", None)
    refuse_another(manager, options, current.manager, address, current.name)
    manager.finish(current.name, keep=True)  # what it opened (a gateway's client) is let go
    notice = (
        f"{PROG}: cluster {current.name!r} is already up; using it "
        f"(add --replace to start a new one with these options)"
    )
    if "idle_timeout" in options.given:
        _watch_idle(current, idle_timeout)
        notice = f"{PROG}: cluster {current.name!r} is already up; using it, with the new idle timeout"
    done = Starting(PROG, current.name, 0)
    done.run_here(lambda _: status(notice=notice))
    return done


def _start_job(
    manager: ClusterManager,
    options: ClusterOptions,
    began: float,
    reports_every: float,
    idle_after: tuple[float, float],
    handle: Starting,
) -> ClusterInfo:
    """The start itself (``steps``), with distributed's own lines in the log file rather than the notebook: the
    cluster is in use from the moment its scheduler answers (``SchedulerAnswered``; ``idle_after``: the idle timeout
    and the idle park, in seconds), ready once its workers are (``WorkersReady``). Its end, whatever it is, is the
    owner's to say (``StartEnded``)."""
    try:
        with start_logs.during_start(manager.background):  # distributed's lines to the log file; a failure names it
            started = steps.start(manager, options, handle)
            with steps.undone_on_failure(started):
                if reports_every > 0:  # set before the owner takes it: a start stopped meanwhile lets all of it go
                    cpu = manager.declared_workers == "cpu"
                    started.telemetry = start_collecting(started.client, reports_every, cpu)
                started.idle = _idle_watcher(started, idle_after[0])
                started.idle_park = parking.watch_idle(started, idle_after[1])
                if not events.accepted(owner.post(events.SchedulerAnswered(handle, started))):
                    raise StartCancelled  # a stop asked meanwhile came first: this start ends as stopped
                record_writer.write_record(started)
                waiting = steps.come(started, began, handle)
        state = cluster_state.read(started)  # the verb's one read: the record and the output are made from it
        if started.telemetry is not None:  # the view's hosts and GPUs come from the workers' first reports
            started.telemetry.wait_first_reports(len(state.workers))
        record_writer.write_record(started, state=state)
        if not events.accepted(owner.post(events.WorkersReady(handle, time.perf_counter() - began))):
            raise StartCancelled  # stopped just now: what it made is the stop's to close
    except BaseException as error:  # the start's end, whatever it is, is the owner's to say; then it is raised
        owner.post(events.StartEnded(handle, failed=not isinstance(error, StartCancelled)))
        raise
    return cluster_state.describe(started, state, notice=waiting)


def _take_into_use(taken: events.TakeIntoUse) -> None:
    """On the owner, as the machine takes a start's cluster into use: dask's settings, the record's refresh."""
    started = taken.cluster
    started.saved_config = dask_settings.apply(started.manager.settings())
    reports = started.telemetry
    if reports is not None:
        reports.kernel_held = kernel_report.held_by_uuid
        started.refresher = RecordRefresher(
            lambda: record_writer.write_record(started, refresh=True), lambda: reports.version, RECORD_REFRESH_S
        )
    _register_atexit()


def _start_ready(ready: events.StartReady) -> None:
    """On the owner, as the machine ends a start: GPU workers' dask settings, and how long the start took."""
    started = ready.cluster
    if started is not None and started.workers_kind == "gpu":
        from gpu_magics.arrays.dask_settings import cupy_cluster_defaults

        assert started.saved_config is not None
        started.saved_config.update(dask_settings.apply(cupy_cluster_defaults()))
    ready.start.ready_at(ready.elapsed)


owner.carries(events.TakeIntoUse, _take_into_use)
owner.carries(events.StartReady, _start_ready)


def prestart_processes() -> None:
    """Launch the server that worker processes fork from (``workers.forkserver``) and, on a host with GPUs, the
    process that starts the CUDA driver (``workers.driver_start``) ahead of a first start; a failure here only
    makes that start slower."""
    from gpu_magics.cluster.workers import driver_start

    for launch, what in ((forkserver.start_server, "the worker server"), (driver_start.start, "the CUDA driver")):
        try:
            launch()
        except Exception as error:  # a failure of any kind only makes the first start slower
            dropped(f"starting {what} ahead", error)


def unreported_start_failure() -> str | None:
    """The line of a background start that failed, if nobody said it yet (then it counts as said)."""
    failed = kernel_cluster.unreported()
    return None if failed is None else failed.take_unreported()


def start_progress() -> StartProgress | None:
    """How far the start (restart, scale) under way got (``None``: none is under way)."""
    pending = kernel_cluster.under_way()
    return None if pending is None else pending.progress()


def written_status(current: ActiveCluster, notice: str) -> ClusterInfo:
    """The end of a verb that changed the workers: one read, from which the record and the output are made."""
    state = cluster_state.read(current)
    record_writer.write_record(current, state=state)
    return cluster_state.describe(current, state, notice=notice)


def stop(close: bool = False, keep: bool = False, *, only: ActiveCluster | None = None) -> str:
    """Close the cluster started here (or only disconnect from one attached to; an adopted one is closed only
    with ``close``; a gateway cluster made here is left running with ``keep``); a start under way is stopped (what
    it made is closed). ``only``: stop only if that cluster is still in use. Says what it did, within about
    ``STOP_WAIT_S`` seconds whatever runs: what has not ended by then goes on ending in the background."""
    if keep and kernel_cluster.phase() is Phase.STARTING:
        settle_start()  # keep what the start makes: let it finish first (its failure is this verb's line)
    answer = owner.post(events.StopAsked(only, keep))
    if parking.resumed_first(answer, said_here=False):  # a parked cluster's workers end as usual once resumed
        answer = owner.post(events.StopAsked(only, keep, resumed=True))
    refused = next((item.cluster for item in answer if isinstance(item, events.KeepRefused)), None)
    if refused is not None:
        steps.refuse_keep(refused)
    cancel = next((item.start for item in answer if isinstance(item, events.CancelStart)), None)
    claim = next((item for item in answer if isinstance(item, events.CloseCluster)), None)
    if cancel is not None:
        pending = cancel
        ended = pending.cancel(timeout=STOP_WAIT_S)  # its job closes what it made, then the owner hears it ended
        slow = "" if ended else "; its processes end in the background"
        return f"{PROG}: stopped {pending.name!r} while it was {pending.verb}{slow}"
    if claim is None:
        return NO_CLUSTER
    current = claim.cluster
    during = ""
    if claim.during is not None:
        claim.during.cancel(timeout=0)  # a restart or scale under way: it ends as stopped; the cluster closes
        during = f" while it was {claim.during.verb}"
    held = steps.kept_on_workers(current.client)
    steps.release(current)
    manager = current.manager

    def wound_down(closing: Closing) -> None:
        owner.post(events.CloseEnded(closing))

    closing = Closing(  # in a thread: with a change under way, workers still starting end only slowly
        lambda: manager.finish(current.name, keep=True if keep else False if close else None),
        lambda error: f"{PROG}: closing {current.name!r} failed ({one_line(error)})",
        here=not during,
        then=wound_down,
    )
    owner.post(events.CloseBegan(closing))
    line = closing.line(STOP_WAIT_S)
    if line is None:
        line = f"{PROG}: stopped cluster {current.name!r}{during}; its processes end later"
    elif during:
        line += during
    if held:
        pieces = f"{held} piece{'s' if held > 1 else ''} of data kept on its workers (persisted chunks, futures)"
        line += f"; the {pieces} {'are' if held > 1 else 'is'} gone"
    return line


def wait_wound_down(timeout: float) -> bool:
    """Wait up to ``timeout`` seconds for what the last stop left to end its processes; whether it did."""
    winding = kernel_cluster.winding_down()
    return winding is None or winding.finished.wait(timeout)


def adapt(minimum: int, maximum: int) -> ClusterInfo:
    """Let the cluster grow when tasks wait and shrink when idle, between ``minimum`` and ``maximum`` workers."""
    current = require_owned("adapt", scalable=True)
    parking.asking_workers(events.AdaptAsked(current), "adapt")
    return written_status(current, steps.adapt(current, minimum, maximum))


def free_workers() -> tuple[int, int, list[str]]:
    """Have every worker of the cluster in use give back what its pool caches on its GPU: (bytes released,
    workers that answered, why some memory stays); ``NoCluster`` without a cluster."""
    from gpu_magics.cluster.telemetry.pools import free_workers as free_on_workers

    current = require_active("free")
    parking.asking_workers(events.FreeAsked(current), "free")
    client = current.client
    try:
        return free_on_workers(client)
    except (OSError, RuntimeError, AttributeError) as error:  # the scheduler silent or gone, the loop or client closed
        dropped("freeing the workers' memory", error)  # (a worker's own failure comes back as its answer)
        raise ServiceError(f"{PROG} free: the workers did not answer ({one_line(error)})") from None


def _watch_idle(current: ActiveCluster, timeout: float) -> None:
    """Close ``current`` (attached: detach) after ``timeout`` seconds without a task; 0 stops watching."""
    old, watcher = current.idle, _idle_watcher(current, timeout)
    if old is not None:
        old.stop()
    owner.change(lambda: setattr(current, "idle", watcher))
    if current.record is not None:
        record_writer.write_record(current, refresh=True)


def _idle_watcher(current: ActiveCluster, timeout: float) -> idle.IdleWatcher | None:
    """A watcher that closes ``current`` after ``timeout`` seconds without a task (0: none)."""
    if timeout <= 0:
        return None

    def changed() -> None:  # idle or busy again: the record shows the time left
        if current.record is not None:
            record_writer.write_record(current, refresh=True)

    return idle.IdleWatcher(current.client, timeout, lambda: _close_idle(current), changed)


def _close_idle(watched: ActiveCluster) -> None:
    """The idle watcher's end (on its thread): close the cluster it watched (if still in use) and say so."""

    def claim() -> float | None:  # on the owner: stop() must not wait for the thread that calls this
        if kernel_cluster.in_use() is not watched or watched.idle is None:
            return None
        waited, watched.idle = watched.idle.timeout, None
        return waited

    waited = owner.change(claim)
    if waited is None or stop(only=watched) == NO_CLUSTER:
        return
    print(idle.closed_line(PROG, watched.owned, watched.options.address or watched.name, waited))


def _register_atexit() -> None:
    global _atexit_registered
    if not _atexit_registered:
        atexit.register(_close_at_exit)
        _atexit_registered = True


def _close_at_exit() -> None:
    try:
        stop()
    except Exception as error:  # the process ends: anything goes
        dropped("stopping the cluster at exit", error)
