"""In the kernel: the cluster's GPUs as its workers report them (``ClusterTelemetry``).

``start`` registers the ``GpuTelemetry`` worker plugin (the scheduler installs it on every worker, also on those
that join or restart later) and subscribes to its topic. Each report replaces that worker's previous one; a
worker that says it is leaving, or has not reported for a few intervals (killed, or its host gone), drops out.
From the reports come: the cluster's GPUs, each counted once and named by host (``members``, ``gpu_readings``;
what one is, in ``telemetry.members``),
what each worker process holds on them, and a snapshot feed with the sampler's interface (``feed``), which the
live panel and the cell summary read for ``%%gpurun multi-gpu`` and which ``%gpumonitor`` shows.

Events arrive on the client's event-loop thread: the handler only parses and stores, under a lock.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import socket
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from gpu_magics.cluster.info import WorkerGpu
from gpu_magics.cluster.telemetry.members import ClusterGpu, Member, gpu_json, worker_gpu
from gpu_magics.cluster.telemetry.reports import TOPIC, ReportedGpu, WorkerReport, host_labels, is_this_host
from gpu_magics.cluster.telemetry.sharing import KernelHeld, others_by_gpu
from gpu_magics.monitor.availability import OtherUse
from gpu_magics.monitor.models import HostReading, Snapshot
from gpu_magics.text.units import one_line

if TYPE_CHECKING:
    from distributed import Client

    from gpu_magics.cluster.telemetry.feed import TelemetryFeed

_log = logging.getLogger(__name__)

STALE_INTERVALS = 3.0  # reports missed before a worker counts as gone
MIN_STALE_S = 3.0
REMOTE_INDEX_BASE = 1000  # keys of GPUs the kernel cannot see itself start here (theirs: 0, 1, ...)
HISTORY = 600  # snapshots kept for the feed
REUSE_S = 0.5  # seconds a computed view is reused while no new report came


class ClusterTelemetry:
    """Receives and keeps the GPU reports of one cluster's workers."""

    def __init__(
        self,
        client: Client,
        *,
        interval: float,
        local_uuids: Mapping[str, int] | None = None,
        local_hostname: str | None = None,
        cpu_workers: bool = False,
    ) -> None:
        self.client = client
        self.interval = interval
        self.cpu_workers = cpu_workers  # asked for as CPU workers: the host's GPUs are not theirs unless they use one
        self._local_uuids = dict(local_uuids or {})  # uuid -> the kernel's own index for GPUs it sees
        self._local_hostname = local_hostname or socket.gethostname()
        self._lock = threading.Lock()
        self._reports: dict[str, tuple[WorkerReport, float]] = {}  # worker address -> (report, received)
        self._keys: dict[tuple[str, str], int] = {}  # (host, uuid) -> key
        self._history: deque[Snapshot] = deque(maxlen=HISTORY)
        self._subscribers: list[Callable[[Snapshot], None]] = []
        self._watchers = 0  # subscribers and running cells that want snapshots
        self._emitter: threading.Thread | None = None
        self.version = 0  # counts the reports received: a cheap "has anything changed"
        self.ignored = 0  # messages that were not telemetry this kernel understands
        self._started = False
        self._worker_gpus: tuple[int, float, dict[str, tuple[str, tuple[WorkerGpu, ...]]]] | None = None
        self.kernel_held: KernelHeld | None = None  # what this kernel holds on its GPUs (``sharing``)

    # -- lifecycle ---------------------------------------------------------------------------------------

    def start(self) -> None:
        """Install the plugin on every worker (now and later) and listen to its reports."""
        from gpu_magics.cluster.telemetry.plugin import GpuTelemetry, this_kernel

        self.client.subscribe_topic(TOPIC, self._on_event)
        self.client.register_plugin(GpuTelemetry(self.interval, this_kernel()))
        self._started = True

    def stop(self) -> None:
        """Stop listening and leave the plugin on the workers (``close``): what the cluster's services list lets go."""
        self.close(unregister=False)

    def close(self, *, unregister: bool) -> None:
        """Stop listening; ``unregister`` also stops the plugin on the workers. A cluster this kernel attached
        to keeps it: other kernels attached to the same scheduler listen to the same reports."""
        if not self._started:
            return
        self._started = False
        from distributed.client import ClosedClientError

        from gpu_magics.cluster.telemetry.plugin import PLUGIN_NAME

        with contextlib.suppress(ValueError, RuntimeError, ClosedClientError):  # not subscribed; the client closed
            self.client.unsubscribe_topic(TOPIC)
        if unregister:  # a worker's failed teardown comes back as its answer, not raised: the plugin goes with it
            with contextlib.suppress(ValueError, RuntimeError, OSError, ClosedClientError):  # gone; the comm closed
                self.client.unregister_worker_plugin(PLUGIN_NAME)
        with self._lock:
            self._subscribers.clear()

    # -- receiving ---------------------------------------------------------------------------------------

    def _on_event(self, event: Any) -> None:
        try:
            _, message = event
            report = WorkerReport.from_message(message)
        except (ValueError, TypeError):
            self.ignored += 1
            return
        self.receive(report)

    def receive(self, report: WorkerReport, received: float | None = None) -> None:
        """Keep ``report`` (the event handler calls this; tests may too)."""
        now = time.time() if received is None else received
        if self.cpu_workers and not any(g.process_memory for g in report.gpus):  # a CPU worker using no GPU
            report = dataclasses.replace(report, gpus=())  # has none of its host's (one that uses one reports all)
        with self._lock:
            if report.gone:
                self._reports.pop(report.worker, None)
            else:
                self._reports[report.worker] = (report, now)
            self.version += 1

    def _emit_gap(self) -> float:
        return max(0.05, 0.5 * self.interval)

    # -- snapshots, made in a thread of their own while someone watches (never on the client's event loop,
    # -- whose replies a running cell waits for) ----------------------------------------------------------

    def watch(self) -> Callable[[], None]:
        """Keep snapshots coming (into ``history`` and to subscribers) until the returned function is called."""
        with self._lock:
            self._watchers += 1
            if self._emitter is None or not self._emitter.is_alive():
                self._emitter = threading.Thread(target=self._emit_loop, name="gpu-magics-telemetry", daemon=True)
                self._emitter.start()
        done = threading.Event()

        def unwatch() -> None:
            if not done.is_set():
                done.set()
                with self._lock:
                    self._watchers -= 1

        return unwatch

    def _emit_loop(self) -> None:
        emitted = -1
        while True:
            time.sleep(self._emit_gap())
            with self._lock:
                if self._watchers <= 0:
                    self._emitter = None
                    return
                version = self.version
            if version != emitted:
                emitted = version
                self._emit(time.time())

    def _emit(self, now: float) -> None:
        snapshot = self.snapshot(now)
        with self._lock:
            self._history.append(snapshot)
            subscribers = list(self._subscribers)
        for callback in subscribers:
            try:
                callback(snapshot)
            except Exception:  # a subscriber never stops the reports
                _log.exception("GPU telemetry subscriber failed")

    # -- what the reports say ----------------------------------------------------------------------------

    def fresh_reports(self, now: float | None = None) -> list[tuple[WorkerReport, float]]:
        """The latest report of each worker still heard from, by worker name."""
        now = time.time() if now is None else now
        with self._lock:
            reports = list(self._reports.values())
        return sorted(
            (pair for pair in reports if now - pair[1] <= max(MIN_STALE_S, STALE_INTERVALS * pair[0].interval)),
            key=lambda pair: _natural(pair[0].name),
        )

    def wait_reports_after(self, moment: float, timeout: float | None = None) -> bool:
        """Wait until every worker heard from has reported after ``moment`` (``time.time()``), at most
        ``timeout`` seconds (default: one and a half report intervals); whether they all did. Figures read
        then describe ``moment``, not a sample taken before it. The workers are asked to report at once (one
        round trip), so the wait is that round trip, not the rest of their report interval."""
        limit = time.monotonic() + (1.5 * self.interval + 0.2 if timeout is None else timeout)
        if all(received > moment for _, received in self.fresh_reports()):
            return True
        from gpu_magics.cluster.telemetry.feed import ask_for_reports

        if ask_for_reports(self.client) is False:
            return False
        while True:
            reports = self.fresh_reports()
            if all(received > moment for _, received in reports):
                return True
            if time.monotonic() >= limit:
                return False
            time.sleep(0.02)

    def wait_first_reports(self, count: int, timeout: float = 1.0) -> bool:
        """Have the workers report now, and wait (at most ``timeout`` s) until ``count`` of them have: whether so."""
        from gpu_magics.cluster.telemetry.feed import ask_for_reports

        limit = time.monotonic() + timeout
        if len(self.fresh_reports()) < count and ask_for_reports(self.client) is not False:
            while len(self.fresh_reports()) < count and time.monotonic() < limit:
                time.sleep(0.01)
        return len(self.fresh_reports()) >= count

    def reports_age(self, now: float | None = None) -> float | None:
        """Seconds since the oldest of the workers' latest reports came; ``None`` before any."""
        now = time.time() if now is None else now
        reports = self.fresh_reports(now)
        return max(0.0, now - min(received for _, received in reports)) if reports else None

    def members(self, now: float | None = None) -> list[Member]:
        """Each worker heard from lately, with the GPUs it uses; a GPU that several workers see (dask-cuda
        workers see every GPU of their host) goes to the worker that computes on it (its index 0)."""
        reports = self.fresh_reports(now)
        labels = host_labels(report for report, _ in reports)
        owner: dict[tuple[str, str], tuple[str, ReportedGpu]] = {}
        for report, _ in reports:
            for gpu in report.gpus:
                key = (report.host, gpu.uuid)
                if key not in owner or (gpu.index == 0 and owner[key][1].index != 0):
                    owner[key] = (report.worker, gpu)
        members = []
        for report, received in reports:
            mine = [
                self._cluster_gpu(report, labels[report.host], gpu)
                for gpu in report.gpus
                if owner[(report.host, gpu.uuid)][0] == report.worker
            ]
            mine.sort(key=lambda g: g.gpu.nvml_index if g.gpu.nvml_index is not None else g.gpu.index)
            members.append(Member(report, labels[report.host], tuple(mine), received))
        return members

    def gpus(self, now: float | None = None) -> list[ClusterGpu]:
        """Every GPU of the cluster once, by host then number."""
        found = [gpu for member in self.members(now) for gpu in member.gpus]
        return sorted(found, key=lambda g: (g.host_label is not None, g.host_label or "", g.key))

    def has_gpus(self) -> bool:
        return any(report.gpus for report, _ in self.fresh_reports())

    def worker_gpus(self, now: float | None = None) -> dict[str, tuple[str, tuple[WorkerGpu, ...]]]:
        """Worker address -> (its host label, its GPUs) for ``%gpucluster status`` and the backend's plan;
        asked several times per cell, so kept for ``REUSE_S`` while no report comes."""
        if now is None:
            cached = self._worker_gpus
            if cached is not None and cached[0] == self.version and time.time() - cached[1] < REUSE_S:
                return cached[2]
            found = self._worker_gpus_at(time.time())
            self._worker_gpus = (self.version, time.time(), found)
            return found
        return self._worker_gpus_at(now)

    def worker_gpus_alone(self) -> dict[str, tuple[str, tuple[WorkerGpu, ...]]]:
        """``worker_gpus`` without what other processes hold on the GPUs: what a cell's plan reads (its hardware
        line, which workers have a GPU), without reading this kernel's own memory from NVML at every cell."""
        return {
            member.report.worker: (member.host_label, tuple(worker_gpu(gpu, None) for gpu in member.gpus))
            for member in self.members()
        }

    def _worker_gpus_at(self, now: float) -> dict[str, tuple[str, tuple[WorkerGpu, ...]]]:
        members = self.members(now)
        others = self.others(members)
        return {
            member.report.worker: (
                member.host_label,
                tuple(worker_gpu(gpu, others.get((gpu.host, gpu.gpu.uuid))) for gpu in member.gpus),
            )
            for member in members
        }

    def others(self, members: list[Member]) -> dict[tuple[str, str], OtherUse]:
        """(host, GPU UUID) -> what processes that are not this cluster's or this kernel's hold there."""
        owners = [(member.report, gpu.gpu) for member in members for gpu in member.gpus]
        reports = [member.report for member in members]
        here = self._local_hostname

        def kernel_host(report: WorkerReport) -> bool:
            return is_this_host(report.host, report.hostname, here)

        return others_by_gpu(owners, reports, kernel_host, self.kernel_held)

    def members_json(self, now: float | None = None) -> list[dict[str, Any]]:
        """The members as the discovery record holds them (``labextension/src/types.ts``: IClusterMember);
        each worker also lists what its process holds on GPUs that another worker uses."""
        found = []
        members = self.members(now)
        others = self.others(members)
        for member in members:
            report = member.report
            used = {gpu.gpu.uuid for gpu in member.gpus}
            extra = [
                self._cluster_gpu(report, member.host_label, gpu)
                for gpu in report.gpus
                if gpu.uuid not in used and gpu.process_memory
            ]
            found.append(
                {
                    "name": report.name,
                    "address": report.worker,
                    "host": report.host,
                    "host_label": member.host_label,
                    "pid": report.pid,
                    "role": "worker",
                    "gpus": [gpu_json(gpu, others.get((gpu.host, gpu.gpu.uuid))) for gpu in (*member.gpus, *extra)],
                    "time": report.time,
                }
            )
        return found

    def snapshot(self, now: float | None = None) -> Snapshot:
        """The cluster's GPUs now, as one monitor snapshot (no host reading: the workers' hosts are many)."""
        now = time.time() if now is None else now
        reports = self.fresh_reports(now)
        status = None
        if not reports:
            status = "no worker has reported its GPUs yet"
        elif not any(report.gpus for report, _ in reports):
            status = next((report.status for report, _ in reports if report.status), "the workers have no GPU")
        host = HostReading(cpu_percent=None, memory_used=None, memory_total=None, cpu_count=0)
        readings = tuple(gpu.reading() for gpu in self.gpus(now))
        # as of its oldest report: a cell's figures then never take a reading from before the cell for one of it
        as_of = min((received for _, received in reports), default=now)
        return Snapshot(time=as_of, gpus=readings, host=host, status=status)

    def _cluster_gpu(self, report: WorkerReport, host_label: str, gpu: ReportedGpu) -> ClusterGpu:
        here = is_this_host(report.host, report.hostname, self._local_hostname)
        local_index = self._local_uuids.get(gpu.uuid) if here else None
        if local_index is not None:
            return ClusterGpu(key=local_index, host=report.host, host_label=None, worker=report.worker, gpu=gpu)
        with self._lock:
            key = self._keys.setdefault((report.host, gpu.uuid), REMOTE_INDEX_BASE + len(self._keys))
        return ClusterGpu(key=key, host=report.host, host_label=host_label, worker=report.worker, gpu=gpu)

    # -- the sampler's interface, for the live panel and the cell summary -----------------------------

    def feed(self) -> TelemetryFeed:
        from gpu_magics.cluster.telemetry.feed import TelemetryFeed

        return TelemetryFeed(self)

    def history(self, since: float | None = None) -> list[Snapshot]:
        with self._lock:
            snapshots = list(self._history)
        return snapshots if since is None else [s for s in snapshots if s.time > since]

    def subscribe(self, callback: Callable[[Snapshot], None]) -> Callable[[], None]:
        with self._lock:
            self._subscribers.append(callback)
        unwatch = self.watch()

        def unsubscribe() -> None:
            with self._lock:
                if callback in self._subscribers:
                    self._subscribers.remove(callback)
            unwatch()

        return unsubscribe


def _natural(name: str) -> tuple[int, int | str]:
    return (0, int(name)) if name.isdigit() else (1, name)


def start_collecting(client: Client, interval: float, cpu_workers: bool = False) -> ClusterTelemetry | None:
    """Have every worker of ``client``'s cluster report its GPUs every ``interval`` seconds; ``None`` (said in one
    line) where the workers cannot load the plugin: the cluster still works."""
    from gpu_magics import gpus

    local = {device.uuid: index for index, device in enumerate(gpus.usable_devices()) if device.uuid}
    collector = ClusterTelemetry(client, interval=interval, local_uuids=local, cpu_workers=cpu_workers)
    try:
        collector.start()
    except Exception as error:  # the cluster works without the reports: the line says why
        print(f"%gpucluster: the workers will not report their GPUs ({one_line(error)})", file=sys.stderr)
        collector.close(unregister=False)
        return None
    return collector
