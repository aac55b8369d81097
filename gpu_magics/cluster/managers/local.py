"""A cluster started here: dask-cuda's ``LocalCUDACluster`` (one worker per chosen GPU) or distributed's
``LocalCluster`` (``--cpu-workers N``), its worker processes forked from this package's worker server, warmed
while they start. Closed on ``stop``, ``%unload_ext`` and interpreter exit; its worker processes exit by
themselves when this process dies (each watches a pipe from its parent: ``distributed.process.AsyncProcess``)."""

from __future__ import annotations

import contextlib
import threading
import time
from typing import TYPE_CHECKING, Any

import psutil
from IPython.core.error import UsageError

from gpu_magics.cluster.background.starting import Starting
from gpu_magics.cluster.managers import factories
from gpu_magics.cluster.managers.base import ClusterManager
from gpu_magics.cluster.options import PROG, ClusterOptions, Kind
from gpu_magics.cluster.reading import inspection
from gpu_magics.cluster.workers import forkserver
from gpu_magics.units import dropped

if TYPE_CHECKING:
    from distributed import Client, LocalCluster


CANCEL_CHECK_S = 0.1  # how often a start that waits for its workers looks whether it was stopped


class LocalManager(ClusterManager):
    """The ``LocalCluster`` this kernel starts (``cluster`` is ``None`` until ``connect``)."""

    owned = True
    background = True

    def __init__(self, kind: Kind, gpu_ids: tuple[str, ...]) -> None:
        super().__init__(None, None)
        self.kind = kind
        self.gpu_ids = gpu_ids  # CUDA devices given to the workers (GPU clusters)
        if kind == "gpu":  # here, in the cell that asked: one line when this kernel already holds memory there
            from gpu_magics.cluster.workers import kernel_context

            kernel_context.report(gpu_ids, PROG)
        self._made = threading.Event()
        self._helper: threading.Thread | None = None
        self._watch: Any = None  # warmup.WarmWatch, from the workers' start to their warm-up's end

    @property
    def source(self) -> str:
        return "started here"

    @property
    def taken(self) -> str:
        return "up since"

    @property
    def title(self) -> str:
        return "GPU cluster" if self.kind == "gpu" else "CPU cluster"

    @property
    def local_cluster(self) -> LocalCluster | None:
        return self.cluster

    def settings(self) -> dict[str, Any]:
        """distributed's multiprocessing method stays on this package's worker server while the cluster lives, so
        the processes its nannies start later (a worker that died, ran out of memory or was restarted) fork from
        it too."""
        return dict(forkserver.config())

    def connect(self, options: ClusterOptions, starting: Starting) -> Client:
        """The cluster with its scheduler only: its workers start in ``await_workers``."""
        forkserver.start_server()  # unless %load_ext did: its imports overlap this process's from here on
        from distributed import Client

        if self.kind == "gpu":
            make = factories.gpu_cluster_factory(options, self.gpu_ids)
        else:
            make = factories.cpu_cluster_factory(options)
        with factories.worker_start_config(self.kind):
            self.cluster = make()
        return Client(self.cluster, set_as_default=True)

    def await_workers(self, client: Client, options: ClusterOptions, starting: Starting) -> str | None:
        """Start the workers, and while they start import here what their results need and make this process's
        CUDA context; a worker that cannot start is the start's failure, in one line."""
        from gpu_magics.cluster.workers import warmup

        expected = self.expected_workers() or int(options.cpu_workers or 1)
        scheduler = self.cluster.scheduler
        self._watch = warmup.WarmWatch(client, self.kind == "gpu", lambda count: starting.update(warm=count))
        started = self.cluster.begin_workers(expected)
        starting.counting(lambda: len(scheduler.workers))
        warmup.import_here(self.kind == "gpu")
        starting.imports_done.set()
        self._helper = threading.Thread(
            target=warmup.prepare_here, args=(self.kind == "gpu", self._made), name="gpu-magics-prepare", daemon=True
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

    def warm(self, client: Client, kind: Kind, starting: Starting) -> dict[str, dict[str, Any]]:
        """Each worker warmed itself as it started, and said so (``warmup.WarmWatch``): no round trip."""
        from gpu_magics.cluster.workers import warmup

        assert self._watch is not None
        try:
            seen = self._watch.wait(set(inspection.scheduler_workers(client)), warmup.WARM_TIMEOUT, starting.cancelled)
        finally:
            self._watch.close()
        starting.check()
        self.before_cluster_round()
        return seen

    def learn(self, client: Client, devices: dict[str, dict[str, Any]], addresses: set[str]) -> None:
        """Nothing to ask: the kind of cluster says what the workers have, and their warm-up what they saw."""

    def worker_kind(self, devices: dict[str, dict[str, Any]]) -> Kind:
        return self.kind

    def before_cluster_round(self) -> None:
        if self._helper is not None:
            self._helper.join()

    def start_failed(self, client: Client | None) -> None:
        self._made.set()
        if self._watch is not None:
            self._watch.close()
        if self._helper is not None and self._helper.is_alive():
            self._helper.join()
        if client is not None:
            try:
                client.close(timeout=5)
            except Exception as error:  # a close that fails any way: the start's own error is what the user sees
                dropped("closing the client of a failed start", error)
        if self.cluster is not None:
            try:
                self.cluster.close(timeout=15)
            except Exception as error:  # a close that fails any way: the start's own error is what the user sees
                dropped("closing the cluster of a failed start", error)

    def expected_workers(self) -> int:
        return len(self.gpu_ids) if self.kind == "gpu" else 0

    def check_scale(self, count: int, verb: str) -> None:
        if self.kind == "cpu":
            factories.check_cpu_workers(count, f"{PROG} {verb}")
        if self.kind != "gpu" or count <= len(self.gpu_ids):
            return
        if verb == "adapt":
            raise UsageError(
                f"{PROG} adapt: the cluster may use {len(self.gpu_ids)} GPU(s), one worker each; give at most "
                f"{len(self.gpu_ids)}"
            )
        raise UsageError(
            f"{PROG} scale {count}: the cluster may use {len(self.gpu_ids)} GPU(s) ({','.join(self.gpu_ids)}), one "
            f"worker each; start it with --gpus all --replace for more"
        )

    def resize(self, client: Client, count: int, options: ClusterOptions) -> str | None:
        if self.adaptive is not None:
            self.cluster.adapt(minimum=count, maximum=count)  # distributed's scale() leaves adapting on
            self.adaptive = None
        with factories.worker_start_config():
            self.cluster.scale(count)
            try:
                inspection.wait_for_count(client, count, options.start_timeout)
            except TimeoutError as error:
                raise UsageError(f"{PROG} scale {count}: {error}") from None
        return None

    def close(self) -> None:
        processes = worker_processes(self.cluster)
        try:
            self.cluster.close(timeout=15)
        except Exception as error:  # a close that fails any way (its processes gone): the stop goes on
            dropped("closing the local cluster", error)
        for process in processes:  # a worker still in its start when its nanny closed is left running: end it
            with contextlib.suppress(psutil.Error):  # gone already (psutil checks it is still the same process)
                process.kill()

    def finish(self, name: str, close: bool, keep: bool = False) -> str:
        self.close()
        return f"{PROG}: stopped cluster {name!r}"


def worker_processes(cluster: Any) -> list[psutil.Process]:
    """The worker processes of ``cluster``'s nannies now (a nanny's worker is a child of the fork server)."""
    found = []
    for nanny in list(getattr(cluster, "workers", {}).values()):
        pid = getattr(getattr(getattr(nanny, "process", None), "process", None), "pid", None)
        if pid is not None:
            with contextlib.suppress(psutil.Error):
                found.append(psutil.Process(pid))
    return found
