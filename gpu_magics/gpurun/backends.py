"""The four backends as plans: what hardware a cell runs on and the dask configuration that makes it so.

``cpu-single``  synchronous scheduler, numpy chunks, one thread.
``cpu-threads`` threaded scheduler on ``--workers`` threads (default: every core), numpy chunks.
``gpu``         threaded scheduler whose threads all use one CUDA device (``--device``), cupy chunks;
                this configuration wins over an active distributed ``Client``.
``multi-gpu``   the ``%gpucluster`` client, cupy chunks (numpy chunks on a cluster of CPU workers).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import dask

from gpu_magics import gpus
from gpu_magics.arrays.dask_settings import cupy_cluster_defaults
from gpu_magics.gpurun import device_pools, gpuless
from gpu_magics.gpurun.graphs import kernel_tail, tuning
from gpu_magics.gpurun.options import BACKENDS
from gpu_magics.gpurun.timing import task_count
from gpu_magics.text.argparsing import check_threads
from gpu_magics.text.errors import ClusterError, LineError
from gpu_magics.text.units import dropped

if TYPE_CHECKING:
    from distributed import Client

CPU_COUNT = os.cpu_count() or 1

# Threads feeding one GPU. Every dask task on a GPU only queues kernels, so a few threads keep the device busy;
# more threads add GIL and allocator contention without more throughput. See benchmarks/seed_workload.py.
GPU_BACKEND_THREADS = 8


@dataclass(frozen=True)
class BackendPlan:
    """A resolved backend: where the cell runs and how dask is configured for it."""

    name: str
    hardware: str
    chunk_type: str  # "numpy" or "cupy": what array.backend creates
    config: dict[str, Any] = field(default_factory=dict)
    gpu_indices: tuple[int, ...] = ()
    client: Client | None = None
    notes: tuple[str, ...] = ()
    annotations: dict[str, Any] = field(default_factory=dict)  # dask.annotate(...) for the cell's tasks
    remote_chunks: bool = False  # a kernel without a GPU: NumPy metadata here, CuPy chunks made on the workers
    aggregates_here: bool = False  # a folded reduction's aggregate runs in the kernel (``kernel_tail``)

    @contextlib.contextmanager
    def activate(self) -> Iterator[None]:
        """Apply the dask configuration for the duration of the block (and make the plan's client the current
        one: the config names the distributed scheduler, never the ``Client`` object, so the config stays
        picklable for the processes a nanny starts while the cell runs)."""
        try:
            with dask.config.set(self.config), dask.annotate(**self.annotations):
                if self.client is None:
                    yield
                else:
                    with self.client.as_current(), self.client_calls():
                        yield
        finally:
            forget_closed_client(self.client)

    @contextlib.contextmanager
    def client_calls(self) -> Iterator[None]:
        """How the cell's calls on the plan's client behave: pickling errors in one line, results copied to host
        memory for a kernel without a GPU (``gpuless``), a folded reduction's aggregate here (``kernel_tail``)."""
        with contextlib.ExitStack() as uses:
            if self.client is not None:
                uses.enter_context(quiet_serialization_log())
                if self.remote_chunks:
                    uses.enter_context(gpuless.host_results(self.client))
                if self.aggregates_here:
                    uses.enter_context(kernel_tail.aggregates_here(self.client))
            yield

    def synchronize(self) -> None:
        """Wait for the GPU work this backend queued; called before the clock stops."""
        if self.client is not None and self.chunk_type == "cupy":
            try:
                self.client.run(_synchronize_worker_device, workers=self.annotations.get("workers"))
            except Exception as error:  # the cell's time is measured all the same
                dropped("synchronizing the workers' GPUs", error)
        elif self.gpu_indices:
            gpus.synchronize(self.gpu_indices)

    def explain_error(self, error: BaseException) -> str | None:
        """One line for an error this plan's set-up explains better than its traceback (``None``: show it)."""
        return gpuless.explain(error) if self.remote_chunks else None

    @property
    def splits_time(self) -> bool:
        """Whether runs on this plan report where their time went (GPU backends and clusters)."""
        return self.chunk_type == "cupy" or self.client is not None

    @property
    def worker_count(self) -> int | None:
        """The workers the cell's tasks may run on, where the plan restricts them (``None``: all)."""
        chosen = self.annotations.get("workers")
        return len(chosen) if chosen else None


def forget_closed_client(client: Client | None) -> None:
    """A default client sets ``scheduler = "dask.distributed"`` and takes it back when it closes. When it closed
    while the cell ran (the cluster was stopped meanwhile), leaving the cell's config put that setting back with
    no client behind it, and every later ``compute()`` would fail: take it out again."""
    closed = client is not None and client.status in ("closing", "closed")
    if closed and dask.config.get("scheduler", default=None) in ("dask.distributed", "distributed"):
        dask.config.config.pop("scheduler", None)


class _Quiet(logging.Filter):
    """Drops every record while ``quiet`` is above 0 (a filter: changing a logger's level would clear the
    level cache of every logger, at each cell)."""

    quiet = 0

    def filter(self, record: logging.LogRecord) -> bool:
        return self.quiet <= 0


_pickle_log = _Quiet()


@contextlib.contextmanager
def quiet_serialization_log() -> Iterator[None]:
    """distributed logs a long traceback when the graph does not pickle, then raises; the cell's error already
    names the object in one line (``execute.unpicklable_reason``)."""
    logger = logging.getLogger("distributed.protocol.pickle")
    if _pickle_log not in logger.filters:
        logger.addFilter(_pickle_log)
    _pickle_log.quiet += 1
    try:
        yield
    finally:
        _pickle_log.quiet -= 1


@dataclass(frozen=True)
class Preferences:
    """User settings that shape backend plans (traits of ``GpuMagics``)."""

    gpu_threads: int = GPU_BACKEND_THREADS
    cpu_threads: int | None = None


# Which backends each option of %%gpurun applies to (the magic parses them; these rules decide).
OPTION_BACKENDS: dict[str, tuple[str, ...]] = {"device": ("gpu",), "workers": ("cpu-threads", "gpu")}


@dataclass(frozen=True)
class Skipped:
    """A backend that ``--compare all`` leaves out here, and why (one line)."""

    backend: str
    reason: str


def unavailable_reason(name: str) -> str | None:
    """Why ``name`` cannot run cells here (``None`` when it can): no GPU, simulated GPUs, no CuPy, no cluster."""
    if name == "gpu":
        return gpus.inventory().unavailable_reason()
    if name == "multi-gpu":
        from gpu_magics.cluster.control import queries

        if queries.active_client() is not None:
            return None
        return f"no cluster: start one with {queries.start_cluster_command()}"
    return None


def plan(
    name: str | None,
    *,
    device: int | None = None,
    workers: int | None = None,
    default: str = "auto",
    preferences: Preferences | None = None,
) -> BackendPlan:
    """Resolve ``name`` (``None`` = the default backend) into a plan, or raise a one-line ``LineError``."""
    preferences = preferences or Preferences()
    chosen = name or default
    notes: list[str] = []
    if chosen == "auto":
        chosen, reason = _auto_choice()
        notes.append(f"auto picked {chosen}: {reason}")
    for option, value in (("device", device), ("workers", workers)):
        if value is not None and chosen not in OPTION_BACKENDS[option]:
            names = OPTION_BACKENDS[option]
            allowed = f"the {names[0]} backend" if len(names) == 1 else " and ".join(names)
            raise LineError(f"%%gpurun: --{option} applies to {allowed} only, not {chosen}.")
    builder = _BUILDERS.get(chosen)
    if builder is None:
        raise LineError(f"%%gpurun: unknown backend {chosen!r}; choose one of {', '.join(BACKENDS)}, auto.")
    result = builder(device, workers, preferences)
    if notes:
        result = dataclasses.replace(result, notes=(*notes, *result.notes))
    return result


def plans_for(
    names: Sequence[str | None],
    *,
    device: int | None = None,
    workers: int | None = None,
    default: str = "auto",
    preferences: Preferences | None = None,
) -> list[BackendPlan]:
    """Plans for ``names`` in order (``--compare a,b``): an option goes to the backends it applies to; a
    single backend (or the default) gets every option, so a mismatch is the user's ``LineError``."""
    if len(names) == 1:
        return [plan(names[0], device=device, workers=workers, default=default, preferences=preferences)]
    plans = []
    for name in names:
        chosen = name or default
        plans.append(
            plan(
                name,
                device=device if chosen in (*OPTION_BACKENDS["device"], "auto") else None,
                workers=workers if chosen in OPTION_BACKENDS["workers"] else None,
                default=default,
                preferences=preferences,
            )
        )
    return plans


def available_plans(
    *, device: int | None = None, workers: int | None = None, preferences: Preferences | None = None
) -> tuple[list[BackendPlan], list[Skipped]]:
    """Plans for every backend this machine can run (``--compare all``), and the ones it skips with why."""
    plans: list[BackendPlan] = []
    skipped: list[Skipped] = []
    for name in BACKENDS:
        reason = unavailable_reason(name)
        if reason is not None:
            skipped.append(Skipped(name, reason))
            continue
        plans.append(
            plan(
                name,
                device=device if name in OPTION_BACKENDS["device"] else None,
                workers=workers if name in OPTION_BACKENDS["workers"] else None,
                preferences=preferences,
            )
        )
    return plans, skipped


def _auto_choice() -> tuple[str, str]:
    from gpu_magics.cluster.control import queries

    if queries.active_client() is not None and queries.has_gpu_workers():
        return "multi-gpu", "a cluster with GPU workers is attached"
    inventory = gpus.inventory()
    reason = inventory.unavailable_reason()
    if reason is None:
        return "gpu", f"{gpus.describe(inventory.devices())} visible, no GPU cluster attached"
    return "cpu-threads", reason


def _cpu_single(device: int | None, workers: int | None, preferences: Preferences) -> BackendPlan:
    return BackendPlan(
        name="cpu-single",
        hardware="1 CPU thread",
        chunk_type="numpy",
        config={"scheduler": "synchronous", "array.backend": "numpy"},
    )


def _cpu_threads(device: int | None, workers: int | None, preferences: Preferences) -> BackendPlan:
    threads = workers or preferences.cpu_threads or CPU_COUNT
    check_threads(threads, "%%gpurun cpu-threads --workers" if workers else "%config GpuMagics.cpu_threads =")
    return BackendPlan(
        name="cpu-threads",
        hardware=f"{threads} CPU thread{'s' if threads != 1 else ''}",
        chunk_type="numpy",
        config={"scheduler": "threads", "num_workers": threads, "pool": None, "array.backend": "numpy"},
    )


def _gpu(device: int | None, workers: int | None, preferences: Preferences) -> BackendPlan:
    inventory = gpus.inventory()
    found = inventory.devices()
    reason = inventory.unavailable_reason()
    if reason is not None:
        raise LineError(f"%%gpurun gpu: {reason}; use cpu-threads or auto on this machine.")
    index = 0 if device is None else device
    if index >= len(found):
        visible = ", ".join(f"{d.index} ({d.name})" for d in found)
        raise LineError(f"%%gpurun gpu: there is no GPU {index}; visible GPUs: {visible}.")
    threads = workers or preferences.gpu_threads
    check_threads(threads, "%%gpurun gpu --workers" if workers else "%config GpuMagics.gpu_threads =")
    chosen = found[index]
    hardware = f"1x {chosen.name}" + (f" (GPU {index})" if len(found) > 1 else "")
    return BackendPlan(
        name="gpu",
        hardware=hardware,
        chunk_type="cupy",
        config={
            "scheduler": "threads",
            "pool": device_pools.device_pool(index, threads),
            "num_workers": threads,
            "array.backend": "cupy",
            **tuning.gpu_graph_defaults(),
        },
        gpu_indices=(index,),
    )


def _multi_gpu(device: int | None, workers: int | None, preferences: Preferences) -> BackendPlan:
    from gpu_magics.cluster.control import queries

    client = queries.require_client()
    notes: tuple[str, ...] = ()
    annotations: dict[str, Any] = {}
    with_gpu: set[str] = set()
    without_gpu: set[str] = set()
    if queries.worker_count() == 0:
        bounds = queries.adapting()
        if bounds is None or bounds[1] == 0:
            raise ClusterError(
                "%%gpurun multi-gpu: the cluster has no workers; add some with %gpucluster scale N "
                "(or start a new one with %gpucluster --replace)"
            )
        # it adapts: the cell's tasks make it start workers, and the cell waits for them
        notes = (f"the cluster has no workers now; it adapts up to {bounds[1]}, and the cell waits as they start",)
        on_gpus = queries.expected_gpu_workers()
    else:
        with_gpu, without_gpu = queries.split_workers_by_gpu()
        on_gpus = bool(with_gpu)
    if not on_gpus and not notes:
        notes = ("the cluster has no GPU worker",)
    elif without_gpu:
        gpu_count, cpu_count = len(with_gpu), len(without_gpu)
        notes = (
            f"the cluster mixes {gpu_count} GPU worker{'s' if gpu_count != 1 else ''} and {cpu_count} without a "
            f"GPU: this cell's dask tasks run on the GPU workers only (CuPy chunks); the others stay idle",
        )
        annotations = {"workers": sorted(with_gpu), "allow_other_workers": False}
    installed = task_count.plugin_installed(client)
    remote = on_gpus and not gpuless.kernel_has_gpu()
    if remote:
        gpuless.require_package_on_cluster(installed)
        notes = (*notes, gpuless.NOTE)
        config = {"scheduler": "dask.distributed", **cupy_cluster_defaults(), **gpuless.settings()}
    else:
        config = {
            "scheduler": "dask.distributed",
            "array.backend": "cupy" if on_gpus else "numpy",
            **(cupy_cluster_defaults() if on_gpus else {}),
            **(tuning.cluster_graph_defaults(len(with_gpu) or queries.worker_threads(set())) if installed else {}),
        }
    return BackendPlan(
        name="multi-gpu",
        hardware=queries.describe_hardware(),
        chunk_type="cupy" if on_gpus else "numpy",
        config=config,
        client=client,
        notes=notes,
        annotations=annotations,
        remote_chunks=remote,
        aggregates_here=tuning.folds(config) and kernel_tail.enabled(),
    )


_BUILDERS: dict[str, Callable[[int | None, int | None, Preferences], BackendPlan]] = {
    "cpu-single": _cpu_single,
    "cpu-threads": _cpu_threads,
    "gpu": _gpu,
    "multi-gpu": _multi_gpu,
}


def _synchronize_worker_device() -> None:
    import cupy

    cupy.cuda.Device().synchronize()
