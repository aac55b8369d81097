"""What a cluster started here is, whatever its workers: its scheduler in this process, its worker processes forked
from this package's worker server and warmed while they start (``LocalClusterManager``; ``gpu`` and ``cpu`` say
which cluster and which workers). Closed on ``stop``, ``%unload_ext`` and interpreter exit; its worker processes exit
by themselves when this process dies (each watches a pipe from its parent: ``distributed.process.AsyncProcess``)."""

from __future__ import annotations

import abc
import contextlib
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal

import psutil

from gpu_magics.cluster.background.starting import Starting
from gpu_magics.cluster.managers import needs
from gpu_magics.cluster.managers.base import ClusterManager
from gpu_magics.cluster.managers.local import factories
from gpu_magics.cluster.options import PROG, ClusterOptions
from gpu_magics.cluster.reading import inspection
from gpu_magics.cluster.workers import forkserver
from gpu_magics.text.argparsing import check_threads
from gpu_magics.text.errors import StartFailed
from gpu_magics.text.units import dropped

if TYPE_CHECKING:
    from distributed import Client, LocalCluster


CANCEL_CHECK_S = 0.1  # how often a start that waits for its workers looks whether it was stopped


class LocalClusterManager(ClusterManager):
    """The ``LocalCluster`` this kernel starts (``cluster`` is ``None`` until ``start``); a subclass says which
    workers it starts (``_workers_are``), how it makes the cluster (``_factory``) and what a scale may ask for."""

    owned = True
    background = True
    _workers_are: Literal["gpu", "cpu"]

    def __init__(self, options: ClusterOptions) -> None:
        super().__init__(None, None)
        self.options = options
        self._made = threading.Event()
        self._helper: threading.Thread | None = None
        self._watch: Any = None  # warmup.WarmWatch, from the workers' start to their warm-up's end

    def open(self, reuse: bool = False) -> None:
        """The protocol, the count of workers (``_check_count``) and the threads per worker: checked before a running
        cluster stops, so a bad line leaves it running."""
        del reuse  # what the line gives is checked for a reuse too
        needs.comm_protocol(self.options.protocol, PROG)
        self._check_count()
        if self.options.threads_per_worker is not None:
            check_threads(self.options.threads_per_worker, f"{PROG} --threads-per-worker")

    def same_as(self, running: ClusterManager | None, address: str | None) -> bool:
        """A cluster started here, whatever its workers: a line that names one while one runs uses it."""
        del address
        return isinstance(running, LocalClusterManager)

    def _check_count(self) -> None:
        """A one-line error for a count of workers the line gives that this host cannot start."""

    @abc.abstractmethod
    def _factory(self, options: ClusterOptions) -> Callable[[], LocalCluster]:
        """What makes the cluster, with its scheduler only."""

    @property
    def declared_workers(self) -> Literal["gpu", "cpu"]:
        return self._workers_are

    @property
    def source(self) -> str:
        return "started here"

    @property
    def taken(self) -> str:
        return "up since"

    @property
    def _local_cluster(self) -> LocalCluster | None:
        return self.cluster

    def settings(self) -> dict[str, Any]:
        """distributed's multiprocessing method stays on this package's worker server while the cluster lives, so
        the processes its nannies start later (a worker that died, ran out of memory or was restarted) fork from
        it too."""
        return dict(forkserver.config())

    def start(self, options: ClusterOptions, starting: Starting) -> Client:
        """The cluster with its scheduler only: its workers start in ``await_workers``."""
        forkserver.start_server()  # unless %load_ext did: its imports overlap this process's from here on
        from distributed import Client

        make = self._factory(options)
        with factories.worker_start_config(self._workers_are):
            self.cluster = make()
        return Client(self.cluster, set_as_default=True)

    def await_workers(self, client: Client, options: ClusterOptions, starting: Starting) -> str | None:
        """Start the workers, and while they start import here what their results need and make this process's
        CUDA context; a worker that cannot start is the start's failure, in one line."""
        from gpu_magics.cluster.workers import warmup

        gpu = self._workers_are == "gpu"  # what each worker warms, and what this process prepares
        expected = self.expected_workers() or int(options.cpu_workers or 1)
        scheduler = self.cluster.scheduler
        self._watch = warmup.WarmWatch(client, gpu, lambda count: starting.update(warm=count))
        started = self.cluster.begin_workers(expected)
        starting.counting(lambda: len(scheduler.workers))
        warmup.import_here(gpu)
        starting.imports_done.set()
        self._helper = threading.Thread(
            target=warmup.prepare_here, args=(gpu, self._made), name="gpu-magics-prepare", daemon=True
        )
        self._helper.start()
        deadline = time.monotonic() + options.start_timeout
        try:
            while True:  # in slices, so that a stop is heard at once
                try:
                    started.result(timeout=CANCEL_CHECK_S)
                    break
                except TimeoutError:  # not cancelled: the cluster's close waits for workers under way, then
                    starting.check()  # closes them (a cancelled start would leave their processes behind)
                    if time.monotonic() > deadline:
                        raise TimeoutError(f"the workers did not start within {options.start_timeout:g} s") from None
        finally:
            starting.counting(None)
        starting.update(joined=len(scheduler.workers))
        self._made.set()
        return None

    def _warm(
        self, client: Client, options: ClusterOptions, devices: dict[str, dict[str, Any]], starting: Starting
    ) -> dict[str, dict[str, Any]]:
        """Each worker warmed itself as it started, and said so (``warmup.WarmWatch``): no round trip."""
        from gpu_magics.cluster.workers import warmup

        assert self._watch is not None
        try:
            seen = self._watch.wait(set(inspection.scheduler_workers(client)), warmup.WARM_TIMEOUT, starting.cancelled)
        finally:
            self._watch.close()
        starting.check()
        if self._helper is not None:  # this process's own preparation, before the round across the cluster
            self._helper.join()
        return seen

    def learn(self, client: Client, devices: dict[str, dict[str, Any]], addresses: set[str]) -> None:
        """Nothing to ask: the class says what the workers are, and their warm-up what they saw."""

    def scale(self, client: Client, count: int, options: ClusterOptions) -> str | None:
        if self.adaptive is not None:
            self.cluster.adapt(minimum=count, maximum=count)  # distributed's scale() leaves adapting on
            self.adaptive = None
        with factories.worker_start_config():
            self.cluster.scale(count)
            try:
                inspection.wait_for_count(client, count, options.start_timeout)
            except TimeoutError as error:
                raise StartFailed(f"{PROG} scale {count}: {error}") from None
        return None

    def finish(self, name: str, keep: bool | None = None) -> str:
        """Close the cluster (``keep`` does not apply: it lives in this kernel's processes); also after a failed
        start, and for a manager that only opened (nothing to close)."""
        self._made.set()
        if self._watch is not None:
            self._watch.close()
        if self._helper is not None and self._helper.is_alive():
            self._helper.join()
        if self.cluster is not None:
            processes = worker_processes(self.cluster)
            try:
                self.cluster.close(timeout=15)
            except Exception as error:  # a close that fails any way (its processes gone): the stop goes on
                dropped("closing the local cluster", error)
            for process in processes:  # a worker still in its start when its nanny closed is left running: end it
                with contextlib.suppress(psutil.Error):  # gone already (psutil checks it is still the same process)
                    process.kill()
        return f"{PROG}: stopped cluster {name!r}"


def worker_pids(cluster: Any) -> dict[str, int]:
    """The process of each worker of ``cluster``'s nannies now, by the worker's name."""
    found = {}
    for name, nanny in dict(getattr(cluster, "workers", {})).items():
        pid = getattr(getattr(getattr(nanny, "process", None), "process", None), "pid", None)
        if pid is not None:
            found[str(name)] = int(pid)
    return found


def worker_processes(cluster: Any) -> list[psutil.Process]:
    """The worker processes of ``cluster``'s nannies now (a nanny's worker is a child of the fork server)."""
    found = []
    for pid in worker_pids(cluster).values():
        with contextlib.suppress(psutil.Error):
            found.append(psutil.Process(pid))
    return found
