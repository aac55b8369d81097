"""In each cluster worker: sample its GPUs and stream them to the kernel (``GpuTelemetry``, a worker plugin).

The plugin runs the project's own ``Sampler`` in the worker process, on the source ``$GPU_MAGICS_SOURCE``
names there (NVML unless it says ``fake``), and sends each snapshot as a ``WorkerReport`` with
``Worker.log_event`` on ``reports.TOPIC``: the worker's batched stream carries it to the scheduler,
which forwards it to the subscribed clients (the kernel). Registered with ``Client.register_plugin``, the
scheduler installs it on every worker that joins later or restarts. Nothing here needs distributed's NVML
diagnostics, and a GPU that cannot be read is reported as such instead of failing the worker.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import threading
import time
from dataclasses import asdict
from typing import Any

from distributed import WorkerPlugin
from distributed.comm import get_address_host

from gpu_magics.cluster.telemetry.pools import memory_on
from gpu_magics.cluster.telemetry.reports import TOPIC, ReportedGpu, WorkerReport
from gpu_magics.monitor.models import Snapshot
from gpu_magics.text.units import dropped

PLUGIN_NAME = "gpu-magics-telemetry"
DEFAULT_INTERVAL = 1.0  # seconds between reports
SLOW_INTERVAL = 5.0  # seconds between reads of the processes on each GPU (NVML's per-process memory)

_log = logging.getLogger(__name__)


class GpuTelemetry(WorkerPlugin):
    """Streams this worker's GPU readings every ``interval`` seconds while the worker runs."""

    name = PLUGIN_NAME
    idempotent = False  # registering again (a new interval) replaces the running one

    def __init__(self, interval: float = DEFAULT_INTERVAL, kernel: tuple[int, int] | None = None) -> None:
        self.interval = float(interval)
        self.kernel = kernel  # the kernel's (pid, process group): its interrupts are not its workers'

        self._sampler: Any = None
        self._unsubscribe: Any = None
        self._worker: Any = None
        self._host = ""
        self._hostname = ""

    def __getstate__(self) -> dict[str, Any]:
        return {"interval": self.interval, "kernel": self.kernel}

    def __setstate__(self, state: dict[str, Any]) -> None:
        kernel = state.get("kernel")
        self.__init__(float(state["interval"]), tuple(kernel) if kernel else None)  # type: ignore[misc]

    def setup(self, worker: Any) -> None:
        from gpu_magics.monitor.sampler import Sampler

        ignore_kernel_interrupts(self.kernel)
        self._worker = worker
        self._host = get_address_host(worker.address)
        self._hostname = socket.gethostname()
        try:
            self._sampler = Sampler(interval=self.interval, slow_interval=SLOW_INTERVAL, history=2)
        except ValueError as error:  # $GPU_MAGICS_SOURCE names no source: say so in every report
            self._sampler = None
            self._send(WorkerReport(**self._identity(), status=f"GPU source: {error}"))
            return
        self._unsubscribe = self._sampler.subscribe(self._on_snapshot)
        self._sampler.start()

    def teardown(self, worker: Any) -> None:
        unsubscribe, self._unsubscribe = self._unsubscribe, None
        if unsubscribe is not None:
            unsubscribe()
        sampler, self._sampler = self._sampler, None
        if sampler is not None:
            sampler.close()
        if self._worker is not None:
            self._send(WorkerReport(**self._identity(), gone=True))

    def _identity(self) -> dict[str, Any]:
        worker = self._worker
        return {
            "worker": str(worker.address),
            "name": str(worker.name),
            "host": self._host,
            "hostname": self._hostname,
            "pid": os.getpid(),
            "time": time.time(),
            "interval": self.interval,
        }

    def _on_snapshot(self, snapshot: Snapshot) -> None:
        # its pool only on the device its tasks use (visible index 0), NVML's figure for it on the others
        gpus = tuple(
            ReportedGpu.from_reading(reading, memory_on(reading, 0 if reading.index == 0 else None, "worker"))
            for reading in snapshot.gpus
        )
        report = WorkerReport(**{**self._identity(), "time": snapshot.time}, gpus=gpus, status=snapshot.status)
        self._send(report)

    def _send(self, report: WorkerReport) -> None:
        worker = self._worker
        if worker is None or getattr(worker, "status", None) is None:
            return
        try:
            worker.log_event(TOPIC, report.to_message())
        except (OSError, RuntimeError, TypeError):  # its stream (CommClosedError) or loop closed, a message msgpack
            # refuses: dropped
            _log.debug("sending GPU telemetry failed", exc_info=True)


def report_now(dask_worker: Any = None) -> bool:
    """``client.run`` target: send this worker's GPU report at once (a fast read, no slow fields) instead of at its
    next interval; whether the worker has the plugin."""
    plugin = getattr(dask_worker, "plugins", {}).get(PLUGIN_NAME)
    sampler = getattr(plugin, "_sampler", None)
    if sampler is None:
        return False
    sampler.tick()
    return True


def describe_gpus(dask_worker: Any = None) -> list[dict[str, Any]]:
    """``client.run`` target: this worker's GPUs (model, UUID, memory, indices), read now; ``[]`` without any."""
    from gpu_magics.monitor.sources import default_source

    try:
        source = default_source()
    except ValueError:
        return []
    try:
        readings, _ = source.read(slow=False)
    finally:
        source.close()
    return [asdict(ReportedGpu.from_reading(reading)) for reading in readings if not reading.error]


def this_kernel() -> tuple[int, int]:
    """This process's id and process group (in the kernel: what its workers compare theirs with)."""
    return os.getpid(), os.getpgrp()


def ignore_kernel_interrupts(kernel: tuple[int, int] | None) -> bool:
    """In a worker process that is in the kernel's process group (a ``LocalCluster`` made in the notebook and
    adopted): ignore SIGINT, which Jupyter sends to the kernel's whole group on every interrupt and at shutdown,
    and which would end the worker with a nanny's ``CancelledError`` traceback. Never in the kernel itself, nor
    where the worker is a thread. Whether it now ignores them."""
    if kernel is None or os.getpid() == kernel[0] or threading.current_thread() is not threading.main_thread():
        return False
    try:
        if os.getpgrp() != kernel[1]:
            return False
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    except (OSError, ValueError) as error:  # no process groups here, or not the main thread after all
        dropped("ignoring the kernel's interrupts in a worker", error)
        return False
    return True
