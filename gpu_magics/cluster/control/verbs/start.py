"""``%gpucluster`` (start, or attach to, a cluster): the line is checked, the machine decides from one view (reuse
what runs or starts, stop it first, or begin: ``StartAsked``), and the start's job tells it how far it got
(``SchedulerAnswered``, ``WorkersReady``, ``StartEnded``); what the machine answers, the owner carries out."""

from __future__ import annotations

import atexit
import contextlib
import functools
import time
from collections.abc import Callable
from typing import Any, cast

from IPython.core.error import UsageError

from gpu_magics.arrays import dask_settings
from gpu_magics.cluster.background import start_logs
from gpu_magics.cluster.background.starting import StartCancelled, Starting
from gpu_magics.cluster.control import owner, record_writer, steps
from gpu_magics.cluster.control.answers import status
from gpu_magics.cluster.control.machine import events
from gpu_magics.cluster.control.machine.phase import Phase
from gpu_magics.cluster.control.machine.table import require
from gpu_magics.cluster.control.verbs import idle, park
from gpu_magics.cluster.control.verbs.stop import stop
from gpu_magics.cluster.info import ClusterInfo
from gpu_magics.cluster.managers.base import ClusterManager
from gpu_magics.cluster.managers.opening import make_manager, refuse_another
from gpu_magics.cluster.options import PROG, ClusterOptions
from gpu_magics.cluster.reading import cluster_state
from gpu_magics.cluster.reading.running import ActiveCluster, Role, Service
from gpu_magics.cluster.records import kernel_report
from gpu_magics.cluster.records.refresh import RecordRefresher
from gpu_magics.cluster.telemetry.collector import start_collecting
from gpu_magics.text.units import dropped

DEFAULT_TELEMETRY_INTERVAL = 1.0  # seconds between the GPU reports of each worker
RECORD_REFRESH_S = 2.0  # how often the discovery record takes in new telemetry (the side panel's view)
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
        idle.watch(current, idle_timeout)
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
                services = _services(started, manager.declared_workers == "cpu", reports_every, idle_after)
                if not events.accepted(owner.post(events.SchedulerAnswered(handle, started, services))):
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


def _services(
    started: ActiveCluster, cpu: bool, reports_every: float, idle_after: tuple[float, float]
) -> tuple[tuple[Role, Service], ...]:
    """What runs beside a start's cluster once the machine takes it into use: the telemetry's listener, the idle
    timeout's and the idle park's watches (those asked for); one that fails to start stops those made before it."""
    made: list[tuple[Role, Service | None]] = []
    with contextlib.ExitStack() as undo:  # a failure stops what was made before it
        for role, make in (
            (
                Role.TELEMETRY,
                lambda: start_collecting(started.client, reports_every, cpu) if reports_every > 0 else None,
            ),
            (Role.IDLE_TIMEOUT, lambda: idle.watcher(started, idle_after[0])),
            (Role.IDLE_PARK, lambda: park.watch_idle(started, idle_after[1])),
        ):
            service: Service | None = make()
            made.append((role, service))
            if service is not None:
                undo.callback(service.stop)
        undo.pop_all()
    return tuple((role, service) for role, service in made if service is not None)


def _take_into_use(taken: events.TakeIntoUse) -> None:
    """On the owner, as the machine takes a start's cluster into use: dask's settings, the record's refresh."""
    started = taken.cluster
    started.saved_config = dask_settings.apply(started.manager.settings())
    reports = started.telemetry
    if reports is not None:
        reports.kernel_held = kernel_report.held_by_uuid
        started.attached[Role.RECORD_REFRESH] = RecordRefresher(  # (the machine's step under way: on the owner)
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


def _register_atexit() -> None:
    global _atexit_registered
    if not _atexit_registered:
        atexit.register(_close_at_exit)
        _atexit_registered = True


def _close_at_exit() -> None:
    try:
        stop()
    except (UsageError, OSError, RuntimeError, TimeoutError) as error:  # its one line, the scheduler silent or
        # gone, its loop closed: the process ends all the same
        dropped("stopping the cluster at exit", error)
