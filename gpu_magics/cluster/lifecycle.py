"""The lifecycle of the one cluster a kernel uses: start (GPU or CPU workers) or attach, scale, restart, stop.

``%gpucluster`` drives it; ``%%gpurun multi-gpu`` asks ``require_client()`` and ``has_gpu_workers()``.
Nothing here touches a GPU at import: dask-cuda is imported when a GPU cluster starts, CuPy only inside the
workers. Safety: everything binds to 127.0.0.1 unless ``--host`` says otherwise; clusters started here close
on ``stop``, ``%unload_ext`` and interpreter exit. Every way to get workers (a cluster started here, a scheduler
attached to, SLURM jobs, the user's manager object) is a manager behind ``managers``' one interface, so each
verb here is one call on the manager in use, with no branch on the kind of cluster.
"""

from __future__ import annotations

import atexit
import contextlib
import sys
import threading
import time
from typing import TYPE_CHECKING, Any

from IPython.core.error import UsageError

from gpu_magics import gpus
from gpu_magics.cluster.active import ActiveCluster, in_use, set_in_use
from gpu_magics.cluster.dashboard import links as dashboard_links
from gpu_magics.cluster.info import ClusterInfo
from gpu_magics.cluster.managers import factories
from gpu_magics.cluster.managers.opening import chosen_gpus, open_manager
from gpu_magics.cluster.options import PROG, ClusterOptions
from gpu_magics.cluster.queries import (
    active,
    active_client,
    describe_hardware,
    gpu_worker_devices,
    has_gpu_workers,
    no_cluster_message,
    require_client,
    split_workers_by_gpu,
    telemetry,
    worker_count,
    worker_kind,
)
from gpu_magics.cluster.reading import inspection
from gpu_magics.cluster.reading import status as status_info
from gpu_magics.cluster.records import kernel_report
from gpu_magics.cluster.records import record as cluster_records
from gpu_magics.cluster.records import writer as record_writer
from gpu_magics.cluster.records.refresh import RecordRefresher
from gpu_magics.cluster.stopping import idle
from gpu_magics.cluster.telemetry.collector import ClusterTelemetry
from gpu_magics.cluster.workers import forkserver
from gpu_magics.units import format_duration, one_line

if TYPE_CHECKING:
    pass

# The lifecycle's own verbs, and the queries answered here too: the magic and scripts ask this module, while
# ``gpurun`` asks ``cluster.queries`` only.
__all__ = [
    "active",
    "active_client",
    "adapt",
    "dashboard_url",
    "describe_hardware",
    "free_workers",
    "gpu_worker_devices",
    "has_gpu_workers",
    "prestart_worker_server",
    "require_client",
    "restart",
    "scale",
    "split_workers_by_gpu",
    "start",
    "status",
    "stop",
    "telemetry",
    "worker_count",
]

DEFAULT_TELEMETRY_INTERVAL = 1.0  # seconds between the GPU reports of each worker
RECORD_REFRESH_S = 2.0  # how often the discovery record takes in new telemetry (the side panel's view)

_lock = threading.RLock()
_atexit_registered = False


def start(
    options: ClusterOptions,
    telemetry_interval: float = DEFAULT_TELEMETRY_INTERVAL,
    idle_timeout: float = 0.0,
    namespace: dict[str, Any] | None = None,
) -> ClusterInfo:
    """Start (or attach to) a cluster as ``options`` say; reuses a running one unless ``options.replace``.
    Every worker then reports its GPUs every ``telemetry_interval`` seconds (0: not at all); after
    ``idle_timeout`` seconds without a task (0: never) the cluster closes, or an attached or adopted one is
    detached. ``namespace``: where ``--from NAME`` finds the cluster manager object."""
    began = time.perf_counter()
    with _lock:
        current = in_use()
        if current is not None and current.client.status not in ("running", "connecting"):
            stop()  # it died under us: clean up, then start afresh
            current = None
        # check the GPU choice before anything stops: a bad --gpus must not stop the running cluster (a line that
        # names no GPUs and reuses it, such as a new --idle-timeout, needs none)
        reuse = current is not None and not options.replace and "gpus" not in options.given
        gpu_ids = () if reuse else chosen_gpus(options)
        if current is not None:
            if not options.replace:
                notice = (
                    f"{PROG}: cluster {current.name!r} is already up; using it "
                    f"(add --replace to start a new one with these options)"
                )
                if "idle_timeout" in options.given:
                    _watch_idle(current, idle_timeout)
                    notice = f"{PROG}: cluster {current.name!r} is already up; using it, with the new idle timeout"
                return status(notice=notice)
            stop()
        from gpu_magics.cluster.managers import steps

        manager = open_manager(options, namespace or {}, gpu_ids)
        started, waiting = steps.start(manager, options, began)
        started.saved_config = _apply_settings(manager.settings())
        set_in_use(started)
        if worker_kind(started) == "gpu":
            from gpu_magics.arrays.dask_settings import cupy_cluster_defaults

            started.saved_config.update(_apply_settings(cupy_cluster_defaults()))
        if telemetry_interval > 0:
            _start_telemetry(started, telemetry_interval)
        _watch_idle(started, idle_timeout, write=False)
        state = status_info.read(started)  # the verb's one read: the record and the output are made from it
        record_writer.write_record(started, state=state)
        if started.telemetry is not None:
            reports = started.telemetry
            reports.kernel_held = kernel_report.held_by_uuid
            started.refresher = RecordRefresher(
                lambda: record_writer.write_record(started, refresh=True), lambda: reports.version, RECORD_REFRESH_S
            )
        _register_atexit()
        return status_info.describe(started, state, notice=waiting)


def prestart_worker_server() -> None:
    """Launch the server that worker processes fork from (``workers.forkserver``) ahead of a first start; a
    failure here only makes that start slower."""
    with contextlib.suppress(Exception):
        forkserver.start_server()


def status(notice: str | None = None) -> ClusterInfo:
    """The state of the cluster in use, fetched from its scheduler; ``UsageError`` when there is none."""
    current = _require_active("status")
    if current.telemetry is not None:  # figures from after this call (a cell's pool is not a second old)
        current.telemetry.wait_reports_after(time.time(), timeout=current.telemetry.interval + 0.2)
    workers = inspection.scheduler_workers(current.client)
    if current.manager is not None:
        current.manager.learn(current.client, current.devices, set(workers))
    if not workers and notice is None:
        bounds = current.manager.adaptive if current.manager is not None else None
        if bounds is not None and bounds[1] > 0:
            fix = f"it adapts between {bounds[0]} and {bounds[1]}: workers start when tasks wait"
        elif current.owned:
            fix = f"{PROG} scale N adds some, {PROG} --replace starts a new cluster"
        else:
            fix = "start some"
        notice = f"{PROG}: the cluster has no workers: {fix}"
    return status_info.describe(current, status_info.read(current, workers), notice=notice)


def _written_status(current: ActiveCluster, notice: str) -> ClusterInfo:
    """The end of a verb that changed the workers: one read, from which the record and the output are made."""
    state = status_info.read(current)
    record_writer.write_record(current, state=state)
    return status_info.describe(current, state, notice=notice)


def stop(close: bool = False) -> str:
    """Close the cluster started here (or only disconnect from one attached to; an adopted one is closed only
    with ``close``); says what it did."""
    with _lock:
        current = set_in_use(None)
        if current is None:
            return f"{PROG}: no cluster is running"
        if current.idle is not None:
            current.idle.stop()
        if current.refresher is not None:
            current.refresher.stop()
        cluster_records.remove_record(current.record_path)
        if current.telemetry is not None:
            # an attached cluster may serve other kernels too, which the plugin also reports to: it stays
            current.telemetry.close(unregister=False)
        if current.saved_config is not None:
            import dask

            dask.config.set(current.saved_config)
        with contextlib.suppress(Exception):
            current.client.close(timeout=5)
        assert current.manager is not None
        try:
            return current.manager.finish(current.name, close)
        except Exception as error:
            return f"{PROG}: closing {current.name!r} failed ({one_line(error)})"


def restart() -> ClusterInfo:
    """Restart every worker process of the cluster started here (frees their memory), then warm them again."""
    from gpu_magics.cluster.workers import warmup

    with _lock:
        current = _require_owned("restart")
        began = time.perf_counter()
        try:
            with factories.worker_start_config():
                current.client.restart(timeout=current.options.start_timeout, wait_for_workers=True)
        except Exception as error:
            raise UsageError(f"{PROG} restart: {one_line(error)}") from error
        current.ready_s = time.perf_counter() - began
        current.devices, current.warm_s = warmup.warm_workers(current.client, worker_kind(current))
        return status(notice=f"{PROG}: restarted {current.name!r}")


def scale(count: int) -> ClusterInfo:
    """Grow or shrink the cluster started here to ``count`` workers (at most one per chosen GPU)."""
    from gpu_magics.cluster.managers import steps

    with _lock:
        current = _require_owned("scale", scalable=True)
        notice = steps.scale(current, count)
        return _written_status(current, notice or f"{PROG}: scaled {current.name!r} to {count} worker(s)")


def adapt(minimum: int, maximum: int) -> ClusterInfo:
    """Let the cluster grow when tasks wait and shrink when idle, between ``minimum`` and ``maximum`` workers."""
    with _lock:
        current = _require_owned("adapt", scalable=True)
        from gpu_magics.cluster.managers import steps

        return _written_status(current, steps.adapt(current, minimum, maximum))


def free_workers() -> tuple[int, int, list[str]]:
    """Have every worker of the cluster in use give back what its pool caches on its GPU: (bytes released,
    workers that answered, why some memory stays); ``UsageError`` without a cluster."""
    from gpu_magics.cluster.telemetry.pools import free_worker

    current = _require_active("free")
    try:
        answers = current.client.run(free_worker, on_error="return")
    except Exception as error:
        raise UsageError(f"{PROG} free: the workers did not answer ({one_line(error)})") from None
    released, kept, answered = 0, set(), 0
    for answer in answers.values():
        if isinstance(answer, dict):
            answered += 1
            released += int(answer.get("released") or 0)
            if answer.get("kept"):
                kept.add(str(answer["kept"]))
    return released, answered, sorted(kept)


def _watch_idle(current: ActiveCluster, timeout: float, *, write: bool = True) -> None:
    """Close ``current`` (attached: detach) after ``timeout`` seconds without a task; 0 stops watching."""
    if current.idle is not None:
        current.idle.stop()
        current.idle = None
    if timeout > 0:

        def changed() -> None:  # idle or busy again: the record shows the time left
            if current.record is not None:
                record_writer.write_record(current, refresh=True)

        current.idle = idle.IdleWatcher(current.client, timeout, lambda: _close_idle(current), changed)
    if write and current.record is not None:
        record_writer.write_record(current, refresh=True)


def _close_idle(watched: ActiveCluster) -> None:
    """The idle watcher's end: close the cluster it watched (if still in use) and say so in one line."""
    with _lock:
        if in_use() is not watched or watched.idle is None:
            return
        waited = format_duration(watched.idle.timeout)
        watched.idle = None  # stop() must not wait for the thread that calls this
        stop()
    if watched.owned:
        print(
            f"{PROG}: closed cluster {watched.name!r} after {waited} without a task (--idle-timeout); "
            f"its GPUs are free. {PROG} starts a new one"
        )
    else:
        print(
            f"{PROG}: detached from {watched.options.address or watched.name} after {waited} without a task "
            "(--idle-timeout); its scheduler and workers keep running"
        )


def dashboard_url() -> str | None:
    """The dashboard link of the cluster in use, as the browser can open it (through jupyter-server-proxy
    under JupyterHub; ``None`` when it has none); ``UsageError`` without a cluster."""
    return dashboard_links.for_kernel(inspection.dashboard_link(_require_active("dashboard").client)).url


def _apply_settings(settings: dict[str, Any]) -> dict[str, Any]:
    """Apply dask ``settings`` while the cluster lives (the manager's, and CuPy chunks' defaults on GPU workers,
    also outside ``%%gpurun``: the client is the default one); returns what to put back at ``stop``."""
    import dask

    saved = {key: dask.config.get(key, default=None) for key in settings}
    dask.config.set(settings)
    return saved


def _start_telemetry(current: ActiveCluster, interval: float) -> None:
    """Have every worker report its GPUs; a cluster whose workers cannot load the plugin still works."""
    local = {device.uuid: index for index, device in enumerate(gpus.usable_devices()) if device.uuid}
    collector = ClusterTelemetry(current.client, interval=interval, local_uuids=local)
    try:
        collector.start()
    except Exception as error:
        print(f"{PROG}: the workers will not report their GPUs ({one_line(error)})", file=sys.stderr)
        collector.close(unregister=False)
        return
    current.telemetry = collector


def _require_active(action: str) -> ActiveCluster:
    current = in_use()
    if current is None:
        raise UsageError(f"{PROG} {action}: {no_cluster_message()}")
    return current


def _require_owned(action: str, *, scalable: bool = False) -> ActiveCluster:
    """The cluster in use, if this kernel started it (``scalable``: or it came from a manager object)."""
    current = _require_active(action)
    if not (current.scalable if scalable else current.owned):
        raise UsageError(
            f"{PROG} {action}: this kernel attached to {current.options.address or current.name} and did not start "
            f"it, so it does not {action} its workers; do that where it was started"
        )
    return current


def _register_atexit() -> None:
    global _atexit_registered
    if not _atexit_registered:
        atexit.register(_close_at_exit)
        _atexit_registered = True


def _close_at_exit() -> None:
    with contextlib.suppress(Exception):
        stop()
