"""Making the cluster objects: dask-cuda's ``LocalCUDACluster`` for GPU workers (on the GPUs ``choose_gpus``
picks), distributed's ``LocalCluster`` for CPU workers, each with our warm-up plugin, bound to the chosen host,
and the dask config they start under.

dask-cuda is imported only here, when a GPU cluster is made.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import logging
import math
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from gpu_magics import gpus
from gpu_magics.cluster.dashboard.close import forget_scheduler, stop_dashboard
from gpu_magics.cluster.managers import needs
from gpu_magics.cluster.options import PROG, ClusterOptions, Kind
from gpu_magics.cluster.workers import forkserver
from gpu_magics.text import hints
from gpu_magics.text.errors import LineError
from gpu_magics.text.units import format_bytes

if TYPE_CHECKING:
    from distributed import LocalCluster

# A worker that cannot start within this many seconds, or loses its scheduler for this long, closes itself.
DEATH_TIMEOUT = 30.0
SPILL_AT = 0.8  # of a worker's share of a memory cap: dask-cuda spills its data to host memory from there
MIN_WORKER_MEMORY = 256 * 2**20  # what a CPU worker process needs to start and do a little work


# distributed's own default for distributed.scheduler.worker-saturation (see scheduler_defaults).
DISTRIBUTED_DEFAULT_SATURATION = 1.1


def worker_start_config(kind: Kind | None = None) -> contextlib.AbstractContextManager[Any]:
    """The dask config under which this module's clusters start (and restart) worker processes; with ``kind``,
    also the config their scheduler starts with (``scheduler_defaults``). Call after importing distributed."""
    import dask

    forkserver.mark_preload_set()
    settings = {**(scheduler_defaults(kind) if kind is not None else {}), **forkserver.config()}
    return dask.config.set(settings)


def scheduler_defaults(kind: Kind) -> dict[str, Any]:
    """Scheduler settings tuned for GPU workers, where the user's dask config leaves distributed's defaults.

    ``worker-saturation`` = inf sends every ready root task to its worker at once instead of queuing them on
    the scheduler (distributed's default 1.1). A GPU task mostly enqueues kernels and returns, so with queuing
    the GPU drains while the worker waits for the scheduler's next task: on 4x H200 the seed workload's median
    went from 0.30 s to 0.25 s, and transfers between workers from about 50 to 10.
    """
    import dask

    key = "distributed.scheduler.worker-saturation"
    if kind == "gpu" and dask.config.get(key, default=None) == DISTRIBUTED_DEFAULT_SATURATION:
        return {key: math.inf}
    return {}


class WorkersLater(Protocol):
    """A cluster made with its scheduler only: ``begin_workers`` starts the workers it was made for."""

    def begin_workers(self, count: int) -> concurrent.futures.Future[None]: ...


def _begin_workers(cluster: Any, count: int) -> concurrent.futures.Future[None]:
    """Give ``cluster`` (a ``SpecCluster``) the spec of ``count`` workers, as its ``scale`` does, and start them on
    its event loop; the future ends when they are up, with the first worker's failure if one could not start."""
    while len(cluster.worker_spec) < count:
        cluster.worker_spec.update(cluster.new_worker_spec())

    async def correct() -> None:
        await cluster._correct_state()

    return asyncio.run_coroutine_threadsafe(correct(), cluster.loop.asyncio_loop)


def worker_plugins(gpu: bool) -> tuple[Any, ...]:
    from gpu_magics.cluster.workers.warmup import WarmUp

    return (WarmUp(gpu),)


def capped(options: ClusterOptions, gpu_ids: tuple[str, ...], extra: dict[str, Any]) -> tuple[Any, ...]:
    """Where the notebook's memory cap binds: the plugin that limits each worker to its share, RMM's pool (where one
    is asked) at most that share, and dask-cuda's spilling before it (where the user chose no limit); ``extra`` gets
    the arguments. An RMM pool asked above the share is one line."""
    from gpu_magics.arrays.caps import notebook
    from gpu_magics.arrays.caps.worker_plugin import MemoryCapPlugin

    found = {gpu_id: share for gpu_id in gpu_ids if (share := notebook.worker_share([gpu_id])) is not None}
    if not found:
        return ()
    least, total = min(found.values())
    asked = options.local.rmm_pool_size
    if asked is not None and (asked if isinstance(asked, int) else int(asked * total)) > least:
        raise LineError(
            f"{PROG} --rmm-pool-size: each worker's share of this notebook's memory cap is {format_bytes(least)}; "
            f"give at most that (%gpumemory says the cap)"
        )
    if asked is not None:  # dask-cuda takes a most only with a pool asked
        extra["rmm_maximum_pool_size"] = least
    extra.setdefault("device_memory_limit", int(least * SPILL_AT))
    return (MemoryCapPlugin(found),)


def _common_kwargs(options: ClusterOptions, gpu: bool) -> dict[str, Any]:
    """The arguments of either cluster (``gpu``: of GPU workers)."""
    host = options.host
    dashboard_host = f"[{host}]" if ":" in host else host
    return {
        "name": options.cluster_name,
        "threads_per_worker": options.worker_threads(gpu),
        "host": host,
        "dashboard_address": f"{dashboard_host}:0" if options.dashboard else None,
        "protocol": needs.comm_protocol(options.protocol, PROG),
        "silence_logs": logging.ERROR,
        "death_timeout": DEATH_TIMEOUT,
    }


def cpu_cluster_factory(options: ClusterOptions) -> Callable[[], LocalCluster]:
    from distributed import LocalCluster
    from distributed.worker_memory import parse_memory_limit

    class QuietLocalCluster(LocalCluster):
        """distributed's cluster, made with its scheduler only (``begin_workers``), closing its dashboard first
        (``dashboard.close``)."""

        def begin_workers(self, count: int) -> concurrent.futures.Future[None]:
            return _begin_workers(self, count)

        async def _close(self) -> None:
            await stop_dashboard(self)
            scheduler = self.scheduler
            await super()._close()
            forget_scheduler(scheduler)

    factory = functools.partial(
        QuietLocalCluster,
        n_workers=0,
        # what distributed gives each of N workers, where they start with the cluster
        memory_limit=parse_memory_limit("auto", 1, int(options.cpu_workers or 1), logger=logging.getLogger(__name__)),
        processes=True,
        plugins=worker_plugins(gpu=False),
        **_common_kwargs(options, gpu=False),
    )
    return needs.quiet_ucx_deprecations(factory, options.protocol)


def dask_cuda_missing() -> str:
    """What to do when dask-cuda, which GPU workers need, is not installed."""
    return (
        f"dask-cuda is not installed (pip install 'gpu-magics[cuda12]' or [cuda13]); or use "
        f"{hints.cpu_cluster_command()}"
    )


def most_cpu_workers() -> int:
    """The most CPU worker processes this host can start: four per core, each with at least
    ``MIN_WORKER_MEMORY`` of the memory available now."""
    import psutil

    cores = os.cpu_count() or 1
    return max(1, min(4 * cores, int(psutil.virtual_memory().available // MIN_WORKER_MEMORY)))


def check_cpu_workers(count: int, what: str) -> None:
    """A count of CPU worker processes above what this host can start is one line."""
    most = most_cpu_workers()
    if count > most:
        raise LineError(
            f"{what} {count}: this machine can start at most {most} CPU worker processes ({os.cpu_count()} CPU "
            f"cores, four workers each, and memory for each); give at most {most}, or attach to a larger cluster "
            f"with {PROG} --address"
        )


def gpu_cluster_factory(options: ClusterOptions, gpu_ids: tuple[str, ...]) -> Callable[[], LocalCluster]:
    needs.require("dask_cuda", PROG, dask_cuda_missing())
    from dask_cuda import LocalCUDACluster

    extra: dict[str, Any] = {}
    if options.local.device_memory_limit is not None:
        extra["device_memory_limit"] = options.local.device_memory_limit
    if options.local.rmm_pool_size is not None:
        extra["rmm_pool_size"] = options.local.rmm_pool_size
    plugins = worker_plugins(gpu=True) + capped(options, gpu_ids, extra)

    class WarmingCUDACluster(LocalCUDACluster):
        """dask-cuda's cluster, with the warm-up plugin next to dask-cuda's own in each worker's spec, made with its
        scheduler only: the ``scale`` its ``__init__`` calls is left for ``begin_workers``."""

        _later = True

        def scale(self, n: int = 0, memory: Any = None, cores: Any = None) -> Any:
            if self._later:
                return None
            return super().scale(n, memory=memory, cores=cores)

        def begin_workers(self, count: int) -> concurrent.futures.Future[None]:
            self._later = False
            return _begin_workers(self, count)

        def new_worker_spec(self) -> dict[str, Any]:
            spec: dict[str, Any] = super().new_worker_spec()
            for worker in spec.values():
                worker["options"]["plugins"] = {*worker["options"].get("plugins", ()), *plugins}
            return spec

        async def _close(self) -> None:
            await stop_dashboard(self)
            scheduler = self.scheduler
            await super()._close()
            forget_scheduler(scheduler)

    factory: Callable[[], LocalCluster] = functools.partial(
        WarmingCUDACluster,
        CUDA_VISIBLE_DEVICES=list(gpu_ids),
        n_workers=len(gpu_ids),
        **_common_kwargs(options, gpu=True),
        **extra,
    )
    return needs.quiet_ucx_deprecations(factory, options.protocol)


def choose_gpus(indices: tuple[int, ...] | None) -> tuple[str, ...]:
    """The ``CUDA_VISIBLE_DEVICES`` entries of the chosen GPUs (all visible ones by default)."""
    inventory = gpus.inventory()
    visible = inventory.devices()
    if not visible:
        raise LineError(
            f"{PROG}: no GPU is visible on this machine; use {hints.cpu_cluster_command()} for CPU workers, "
            f"or {PROG} --address <scheduler address> to attach to one"
        )
    if inventory.simulated:
        raise LineError(
            f"{PROG}: {gpus.simulated_reason(len(visible), None)}; use {hints.cpu_cluster_command()} for CPU workers"
        )
    if indices is None:
        return tuple(device.cuda_id for device in visible)
    missing = [index for index in indices if index >= len(visible)]
    if missing:
        names = ", ".join(str(index) for index in range(len(visible)))
        raise LineError(
            f"{PROG} --gpus {','.join(map(str, indices))}: no GPU {','.join(map(str, missing))} here; "
            f"the {len(visible)} visible GPU(s) are {names}"
        )
    return tuple(visible[index].cuda_id for index in indices)


def gpu_cluster_ready() -> bool:
    """Whether plain ``%gpucluster`` starts here: real GPUs are visible and CuPy and dask-cuda are installed."""
    found = gpus.inventory()
    if found.simulated or not found.devices():
        return False
    return hints.gpu_packages_installed()
