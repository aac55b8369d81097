"""The lifecycle of the one cluster a kernel uses: start (GPU or CPU workers) or attach, scale, restart, stop.

``%gpucluster`` drives it; ``%%gpurun multi-gpu`` asks ``require_client()`` and ``has_gpu_workers()``.
Nothing here touches a GPU at import: dask-cuda is imported when a GPU cluster starts, CuPy only inside the
workers. Safety: everything binds to 127.0.0.1 unless ``--host`` says otherwise; clusters started here close
on ``stop``, ``%unload_ext`` and interpreter exit, and their worker processes exit by themselves when this
process dies (each watches a pipe from its parent: ``distributed.process.AsyncProcess``). A cluster attached
to is never stopped from here.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import gc
import logging
import math
import os
import threading
import time
import warnings
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from IPython.core.error import UsageError

from gpu_magics import cluster_records, worker_processes
from gpu_magics.cluster_options import PROG, ClusterOptions, Kind
from gpu_magics.display.cluster_view import ClusterInfo, WorkerInfo

if TYPE_CHECKING:
    from distributed import Client, LocalCluster

# A worker that cannot start within this many seconds, or loses its scheduler for this long, closes itself.
DEATH_TIMEOUT = 30.0
# Workers fork from a server that has imported what they need (worker_processes), and warm up while they
# register with the scheduler (worker_warmup).
DISTRIBUTED_DEFAULT_SATURATION = 1.1
_NO_CLUSTER = (
    f"no cluster is running: start one with {PROG} (one worker per GPU), {PROG} --cpu-workers N, "
    f"or attach with {PROG} --address tcp://host:port"
)


@dataclass
class ActiveCluster:
    """The cluster this kernel uses, and what was learnt about it."""

    name: str
    kind: Kind
    options: ClusterOptions
    client: Client
    cluster: LocalCluster | None  # None when attached: not ours to stop
    gpu_ids: tuple[str, ...] = ()  # CUDA devices given to the workers (GPU clusters)
    devices: dict[str, dict[str, Any]] = field(default_factory=dict)  # worker name -> what its warm-up saw
    started_at: float = field(default_factory=time.time)
    ready_s: float | None = None
    warm_s: float | None = None
    record_path: Path | None = None

    @property
    def owned(self) -> bool:
        """Whether this kernel started the cluster (and so may scale, restart and stop it)."""
        return self.cluster is not None


_active: ActiveCluster | None = None
_lock = threading.RLock()
_atexit_registered = False


# ----------------------------------------------------------------------------------------------------------
# What other modules ask
# ----------------------------------------------------------------------------------------------------------


def active() -> ActiveCluster | None:
    """The cluster in use, or ``None``."""
    return _active


def active_client() -> Client | None:
    """The ``Client`` of the cluster in use, or ``None`` when there is none."""
    current = _active
    return None if current is None else current.client


def require_client() -> Client:
    """The ``Client`` of the cluster in use; a ``UsageError`` pointing to ``%gpucluster`` without one."""
    current = _active
    if current is None:
        raise UsageError(_NO_CLUSTER)
    if current.client.status not in ("running", "connecting"):
        raise UsageError(
            f"the cluster {current.name!r} no longer answers ({current.client.status}); "
            f"run {PROG} --replace to start a new one"
        )
    return current.client


def has_gpu_workers() -> bool:
    """Whether the cluster in use has workers with a GPU."""
    current = _active
    if current is None:
        return False
    if current.kind != "attached":
        return current.kind == "gpu"
    return any(device.get("gpu_name") for device in current.devices.values())


def describe_hardware() -> str:
    """``"4x NVIDIA H200 (4 workers)"``, ``"2 CPU workers x 1 thread"``, or ``"no cluster"``."""
    current = _active
    if current is None:
        return "no cluster"
    try:
        workers = _scheduler_workers(current.client)
    except Exception:
        workers = {}
    return _hardware(current, workers)


def gpu_worker_devices(client: Client) -> dict[str, str]:
    """Worker address -> GPU model, for each worker of ``client``'s cluster that has a GPU."""
    current = _active
    cached = current.devices if current is not None and current.client is client else {}
    skip_gpu = current is not None and current.client is client and current.kind == "cpu"
    found = {}
    for worker in _worker_infos(_scheduler_workers(client), cached, gpu=not skip_gpu):
        if worker.gpu_name:
            found[worker.address] = worker.gpu_name
    return found


def visible_gpus() -> list[str]:
    """The CUDA devices this process may give to workers, as ``CUDA_VISIBLE_DEVICES`` entries: ``["0", "1"]``.

    Read from ``CUDA_VISIBLE_DEVICES`` when set, else counted through NVML (no CUDA context is created).
    Tests replace this function to pretend a machine has GPUs.
    """
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    if env is not None:
        found = []
        for entry in (part.strip() for part in env.split(",")):
            if not entry or entry.startswith("-"):
                break  # CUDA stops at the first invalid entry
            found.append(entry)
        return found
    try:
        from distributed.diagnostics import nvml

        count = int(nvml.device_get_count())
    except Exception:
        count = 0
    return [str(index) for index in range(count)]


# ----------------------------------------------------------------------------------------------------------
# Lifecycle
# ----------------------------------------------------------------------------------------------------------


def start(options: ClusterOptions) -> ClusterInfo:
    """Start (or attach to) a cluster as ``options`` say; reuses a running one unless ``options.replace``."""
    global _active
    began = time.perf_counter()
    with _lock:
        # check the GPU choice first: a bad --gpus must not stop the running cluster
        gpu_ids = _choose_gpus(options.gpus) if options.kind == "gpu" else ()
        current = _active
        if current is not None and current.client.status not in ("running", "connecting"):
            stop()  # it died under us: clean up, then start afresh
            current = None
        if current is not None:
            if not options.replace:
                notice = (
                    f"{PROG}: cluster {current.name!r} is already up; using it "
                    f"(add --replace to start a new one with these options)"
                )
                return status(notice=notice)
            stop()
        started = _attach(options) if options.kind == "attached" else _start_local(options, gpu_ids, began)
        _active = started
        _write_record(started)
        _register_atexit()
        return _info(started)


def prestart_worker_server() -> None:
    """Launch the server that worker processes fork from (``worker_processes``) ahead of a first start; a
    failure here only makes that start slower."""
    with contextlib.suppress(Exception):
        worker_processes.start_server()


def status(notice: str | None = None) -> ClusterInfo:
    """The state of the cluster in use, fetched from its scheduler; ``UsageError`` when there is none."""
    current = _require_active("status")
    workers = _scheduler_workers(current.client)
    if current.kind == "attached":
        _learn_attached_gpus(current, workers)
    return _info(current, workers, notice=notice)


def stop() -> str:
    """Close the cluster started here (or only disconnect from one attached to); says what it did."""
    global _active
    with _lock:
        current, _active = _active, None
        if current is None:
            return f"{PROG}: no cluster is running"
        cluster_records.remove_record(current.record_path)
        with contextlib.suppress(Exception):
            current.client.close(timeout=5)
        if current.cluster is None:
            return (
                f"{PROG}: disconnected from {current.options.address}; its scheduler and workers keep "
                "running (this kernel did not start them)"
            )
        with contextlib.suppress(Exception):
            current.cluster.close(timeout=15)
        return f"{PROG}: stopped cluster {current.name!r}"


def restart() -> ClusterInfo:
    """Restart every worker process of the cluster started here (frees their memory), then warm them again."""
    with _lock:
        current = _require_owned("restart")
        began = time.perf_counter()
        try:
            with _worker_start_config():
                current.client.restart(timeout=current.options.start_timeout, wait_for_workers=True)
        except Exception as error:
            raise UsageError(f"{PROG} restart: {_one_line(error)}") from error
        current.ready_s = time.perf_counter() - began
        current.devices, current.warm_s = _warm(current.client, current.kind)
        return status(notice=f"{PROG}: restarted {current.name!r}")


def scale(count: int) -> ClusterInfo:
    """Grow or shrink the cluster started here to ``count`` workers (at most one per chosen GPU)."""
    with _lock:
        current = _require_owned("scale")
        if current.kind == "gpu" and count > len(current.gpu_ids):
            ids = ",".join(current.gpu_ids)
            raise UsageError(
                f"{PROG} scale {count}: the cluster may use {len(current.gpu_ids)} GPU(s) ({ids}), one "
                f"worker each; start it with --gpus all --replace for more"
            )
        assert current.cluster is not None
        before = set(_scheduler_workers(current.client))
        with _worker_start_config():
            current.cluster.scale(count)
            try:
                _wait_for_count(current.client, count, current.options.start_timeout)
            except TimeoutError as error:
                raise UsageError(f"{PROG} scale {count}: {error}") from None
        workers = _scheduler_workers(current.client)
        names = {str(info.get("name", address)) for address, info in workers.items()}
        current.devices = {name: seen for name, seen in current.devices.items() if name in names}
        new = sorted(set(workers) - before)
        if new:
            devices, current.warm_s = _warm(current.client, current.kind, workers=new)
            current.devices.update(devices)
        _write_record(current)
        return status(notice=f"{PROG}: scaled {current.name!r} to {count} worker(s)")


def dashboard_url() -> str | None:
    """The dashboard address of the cluster in use (``None`` when it has none); ``UsageError`` without one."""
    return _dashboard(_require_active("dashboard").client)


# ----------------------------------------------------------------------------------------------------------
# Starting
# ----------------------------------------------------------------------------------------------------------


def _start_local(options: ClusterOptions, gpu_ids: tuple[str, ...], began: float) -> ActiveCluster:
    """Start the cluster and warm it; ``ready_s`` counts from ``began`` (the magic's start) until every worker
    answered, ``warm_s`` from then until the warm-up is done: together, the magic's wall time."""
    cluster: LocalCluster | None = None
    client: Client | None = None
    made = threading.Event()
    helper = threading.Thread(
        target=_prepare_here, args=(options.kind == "gpu", made), name="gpu-magics-prepare", daemon=True
    )
    try:
        worker_processes.start_server()  # unless %load_ext did: its imports overlap this process's from here on
        from distributed import Client

        make = _gpu_cluster_factory(options, gpu_ids) if options.kind == "gpu" else _cpu_cluster_factory(options)
        helper.start()  # after this thread's imports: two threads importing one package can see it half-made
        with _worker_start_config(options.kind):
            cluster = make()
        made.set()
        client = Client(cluster, set_as_default=True)
        expected = len(gpu_ids) if options.kind == "gpu" else int(options.cpu_workers or 1)
        client.wait_for_workers(expected, timeout=options.start_timeout)
        ready_s = time.perf_counter() - began
        devices, _ = _warm(client, options.kind, before_cluster_round=helper.join)
        warm_s = time.perf_counter() - began - ready_s
    except BaseException as error:
        made.set()
        if helper.is_alive():
            helper.join()
        if client is not None:
            with contextlib.suppress(Exception):
                client.close(timeout=5)
        if cluster is not None:
            with contextlib.suppress(Exception):
                cluster.close(timeout=15)
        if isinstance(error, (UsageError, KeyboardInterrupt, SystemExit)):
            raise
        raise UsageError(f"{PROG}: the cluster did not start: {_one_line(error)}") from error
    return ActiveCluster(
        name=options.cluster_name,
        kind=options.kind,
        options=options,
        client=client,
        cluster=cluster,
        gpu_ids=gpu_ids,
        devices=devices,
        ready_s=ready_s,
        warm_s=warm_s,
    )


def _worker_start_config(kind: Kind | None = None) -> contextlib.AbstractContextManager[Any]:
    """The dask config under which this module's clusters start (and restart) worker processes; with ``kind``,
    also the config their scheduler starts with (``scheduler_defaults``). Call after importing distributed."""
    import dask

    worker_processes.mark_preload_set()
    settings = {**(scheduler_defaults(kind) if kind is not None else {}), **worker_processes.config()}
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


def _worker_plugins(gpu: bool) -> tuple[Any, ...]:
    from gpu_magics.worker_warmup import WarmUp

    return (WarmUp(gpu),)


def _choose_gpus(indices: tuple[int, ...] | None) -> tuple[str, ...]:
    visible = visible_gpus()
    if not visible:
        raise UsageError(
            f"{PROG}: no GPU is visible on this machine; use {PROG} --cpu-workers N for CPU workers, "
            f"or {PROG} --address tcp://host:port to attach to a scheduler"
        )
    if indices is None:
        return tuple(visible)
    missing = [index for index in indices if index >= len(visible)]
    if missing:
        names = ", ".join(str(index) for index in range(len(visible)))
        raise UsageError(
            f"{PROG} --gpus {','.join(map(str, indices))}: no GPU {','.join(map(str, missing))} here; "
            f"the {len(visible)} visible GPU(s) are {names}"
        )
    return tuple(visible[index] for index in indices)


def _common_kwargs(options: ClusterOptions) -> dict[str, Any]:
    host = options.host
    dashboard_host = f"[{host}]" if ":" in host else host
    return {
        "name": options.cluster_name,
        "threads_per_worker": options.threads,
        "host": host,
        "dashboard_address": f"{dashboard_host}:0" if options.dashboard else None,
        "protocol": options.protocol,
        "silence_logs": logging.ERROR,
        "death_timeout": DEATH_TIMEOUT,
    }


def _cpu_cluster_factory(options: ClusterOptions) -> Callable[[], LocalCluster]:
    from distributed import LocalCluster

    return functools.partial(
        LocalCluster,
        n_workers=options.cpu_workers,
        processes=True,
        plugins=_worker_plugins(gpu=False),
        **_common_kwargs(options),
    )


def _gpu_cluster_factory(options: ClusterOptions, gpu_ids: tuple[str, ...]) -> Callable[[], LocalCluster]:
    try:
        from dask_cuda import LocalCUDACluster
    except ImportError:
        raise UsageError(
            f"{PROG}: dask-cuda is not installed (pip install 'gpu-magics[cuda12]' or [cuda13]); "
            f"or use {PROG} --cpu-workers N"
        ) from None
    extra: dict[str, Any] = {}
    if options.device_memory_limit is not None:
        extra["device_memory_limit"] = options.device_memory_limit
    if options.rmm_pool_size is not None:
        extra["rmm_pool_size"] = options.rmm_pool_size
    plugins = _worker_plugins(gpu=True)

    class WarmingCUDACluster(LocalCUDACluster):
        """dask-cuda's cluster, with the warm-up plugin next to dask-cuda's own in each worker's spec."""

        def new_worker_spec(self) -> dict[str, Any]:
            spec: dict[str, Any] = super().new_worker_spec()
            for worker in spec.values():
                worker["options"]["plugins"] = {*worker["options"].get("plugins", ()), *plugins}
            return spec

    factory: Callable[[], LocalCluster] = functools.partial(
        WarmingCUDACluster,
        CUDA_VISIBLE_DEVICES=list(gpu_ids),
        n_workers=len(gpu_ids),
        **_common_kwargs(options),
        **extra,
    )
    return factory


def _attach(options: ClusterOptions) -> ActiveCluster:
    from distributed import Client

    address = options.address
    assert address is not None
    timeout = options.start_timeout
    try:
        client = Client(address, timeout=timeout, set_as_default=True)
    except (OSError, TimeoutError) as error:
        raise UsageError(
            f"{PROG} --address {address}: no scheduler answered within {timeout:g} s ({_one_line(error)})"
        ) from None
    attached = ActiveCluster(name=options.cluster_name, kind="attached", options=options, client=client, cluster=None)
    with contextlib.suppress(Exception):
        _learn_attached_gpus(attached, _scheduler_workers(client))
    return attached


# ----------------------------------------------------------------------------------------------------------
# Warm-up (these run in the worker processes)
# ----------------------------------------------------------------------------------------------------------


def _prepare_here(gpu: bool, made: threading.Event) -> None:
    """While the worker processes start, load here what the first result needs: dask.array, and for GPU workers
    CuPy and this process's CUDA context (results come back as CuPy arrays). Once the cluster is made, collect
    garbage fully: starting a cluster leaves this process (which also hosts the scheduler) with many new
    long-lived objects, which would otherwise set off a full collection, 0.1-0.2 s on a GPU host, during the
    first cells that use the cluster. Off the critical path: this process mostly waits for its workers (their
    CUDA contexts, then their warm-up) meanwhile."""
    with contextlib.suppress(Exception):
        import dask.array  # noqa: F401

        if gpu:
            import cupy

            cupy.zeros(1).sum()
            cupy.cuda.runtime.deviceSynchronize()
    made.wait(timeout=WARM_TIMEOUT)
    gc.collect()


def _warm(
    client: Client,
    kind: Kind,
    workers: list[str] | None = None,
    before_cluster_round: Callable[[], None] | None = None,
) -> tuple[dict[str, dict[str, Any]], float]:
    """Wait for each worker's warm-up (CUDA context and the seed workload's kernels, started with the worker by
    ``worker_warmup.WarmUp``), call ``before_cluster_round``, then run the workload once across the cluster
    (moves a few small chunks between workers). Returns what each worker saw, by worker name, and the seconds
    it took."""
    from gpu_magics import worker_warmup

    began = time.perf_counter()
    gpu = kind == "gpu"
    seen = client.run(worker_warmup.collect, gpu, WARM_TIMEOUT, workers=workers)
    if before_cluster_round is not None:
        before_cluster_round()
    if workers is None:
        _warm_cluster(client, gpu, len(seen))
    names = {address: str(info.get("name", address)) for address, info in _scheduler_workers(client).items()}
    devices = {names.get(address, address): info for address, info in seen.items()}
    return devices, time.perf_counter() - began


WARM_TIMEOUT = 120.0  # seconds; a worker that dies while warming must not hang the magic


def _warm_cluster(client: Client, gpu: bool, workers: int) -> None:
    # Like the seed workload, the result comes back to this process: with CuPy chunks that loads CuPy here and
    # creates this process's CUDA context (on its first GPU), which the first real result would otherwise pay.
    import dask
    import dask.array as da

    from gpu_magics.worker_warmup import WARM_CHUNKS

    threads = max(1, sum(client.nthreads().values()))
    rows = WARM_CHUNKS[0] * max(workers, 1) * min(threads, 8)
    with dask.config.set({"array.backend": "cupy" if gpu else "numpy"}):
        x = da.random.normal(10, 1, size=(rows, WARM_CHUNKS[1]), chunks=WARM_CHUNKS)
        float(client.compute((x + 1)[::2, ::2].mean()).result(timeout=WARM_TIMEOUT))


# ----------------------------------------------------------------------------------------------------------
# Inspection
# ----------------------------------------------------------------------------------------------------------


def _scheduler_workers(client: Client) -> dict[str, dict[str, Any]]:
    try:
        info = client.scheduler_info(n_workers=-1)
    except TypeError:  # distributed before n_workers existed returned every worker
        info = client.scheduler_info()
    return dict(info.get("workers", {}))


def _worker_infos(
    workers: dict[str, dict[str, Any]], devices: dict[str, dict[str, Any]], *, gpu: bool
) -> tuple[WorkerInfo, ...]:
    infos = []
    for address, worker in workers.items():
        name = str(worker.get("name", address))
        seen = devices.get(name, {}) if gpu else {}
        static = (worker.get("gpu") or {}) if gpu else {}
        metrics = worker.get("metrics") or {}
        sampled = (metrics.get("gpu") or {}) if gpu else {}
        used = sampled.get("memory-used")
        infos.append(
            WorkerInfo(
                address=address,
                name=name,
                status=str(worker.get("status", "unknown")),
                threads=int(worker.get("nthreads", 0)),
                gpu_name=seen.get("gpu_name") or static.get("name"),
                gpu_device=seen.get("gpu_device"),
                gpu_memory_used=used if used is not None else seen.get("gpu_memory_used"),
                gpu_memory_total=seen.get("gpu_memory_total") or static.get("memory-total"),
                host_memory_used=metrics.get("memory"),
                host_memory_limit=worker.get("memory_limit") or None,
            )
        )
    return tuple(sorted(infos, key=lambda info: _natural(info.name)))


def _natural(name: str) -> tuple[int, int | str]:
    return (0, int(name)) if name.isdigit() else (1, name)


def _learn_attached_gpus(current: ActiveCluster, workers: dict[str, dict[str, Any]]) -> None:
    for worker in _worker_infos(workers, {}, gpu=True):
        if worker.gpu_name:
            current.devices[worker.name] = {
                "gpu_name": worker.gpu_name,
                "gpu_memory_total": worker.gpu_memory_total,
            }


def _hardware(current: ActiveCluster, workers: dict[str, dict[str, Any]]) -> str:
    infos = _worker_infos(workers, current.devices, gpu=current.kind != "cpu")
    count = len(infos)
    plural = "s" if count != 1 else ""
    suffix = ", attached" if current.kind == "attached" else ""
    models = Counter(info.gpu_name for info in infos if info.gpu_name)
    if models and current.kind != "cpu":
        gpus = " + ".join(f"{number}x {model}" for model, number in models.items())
        return f"{gpus} ({count} worker{plural}{suffix})"
    threads = sorted({info.threads for info in infos})
    per = f"{threads[0]} thread{'s' if threads[0] != 1 else ''}" if len(threads) == 1 else "mixed threads"
    text = f"{count} CPU worker{plural} x {per}" if infos else "0 workers"
    return text + (" (attached)" if suffix else "")


def _info(
    current: ActiveCluster, workers: dict[str, dict[str, Any]] | None = None, notice: str | None = None
) -> ClusterInfo:
    if workers is None:
        workers = _scheduler_workers(current.client)
    return ClusterInfo(
        name=current.name,
        kind=current.kind,
        scheduler_address=_address(current.client),
        dashboard_url=_dashboard(current.client),
        hardware=_hardware(current, workers),
        workers=_worker_infos(workers, current.devices, gpu=current.kind != "cpu"),
        ready_s=current.ready_s,
        warm_s=current.warm_s,
        notice=notice,
    )


def _dashboard(client: Client) -> str | None:
    try:
        link = client.dashboard_link
    except Exception:
        return None
    return str(link) if link else None


def _wait_for_count(client: Client, count: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        now = len(_scheduler_workers(client))
        if now == count:
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"the cluster has {now} workers after {timeout:g} s, not {count}")
        time.sleep(0.05)


def _require_active(action: str) -> ActiveCluster:
    current = _active
    if current is None:
        raise UsageError(f"{PROG} {action}: {_NO_CLUSTER}")
    return current


def _require_owned(action: str) -> ActiveCluster:
    current = _require_active(action)
    if not current.owned:
        raise UsageError(
            f"{PROG} {action}: this kernel attached to {current.options.address} and did not start it, so "
            f"it does not {action} its workers; do that where it was started"
        )
    return current


# ----------------------------------------------------------------------------------------------------------
# Records and exit
# ----------------------------------------------------------------------------------------------------------


def _write_record(current: ActiveCluster) -> None:
    try:
        workers = _scheduler_workers(current.client)
        infos = _worker_infos(workers, current.devices, gpu=current.kind != "cpu")
        if current.kind == "gpu":
            gpus = tuple(info.gpu_device or info.name for info in infos)
        else:
            gpus = tuple(info.gpu_name for info in infos if info.gpu_name)
        record = cluster_records.ClusterRecord(
            name=current.name,
            scheduler_address=_address(current.client),
            dashboard_url=_dashboard(current.client),
            kind=current.kind,
            workers=len(infos),
            gpus=gpus,
            kernel_id=cluster_records.current_kernel_id(),
            started_at=current.started_at,
        )
        if current.record_path is not None and current.record_path.name != record.filename:
            cluster_records.remove_record(current.record_path)
        current.record_path = cluster_records.write_record(record)
    except Exception as error:  # the cluster works without its record; say so once
        warnings.warn(f"{PROG}: could not write the discovery record: {_one_line(error)}", stacklevel=2)


def _register_atexit() -> None:
    global _atexit_registered
    if not _atexit_registered:
        atexit.register(_close_at_exit)
        _atexit_registered = True


def _close_at_exit() -> None:
    with contextlib.suppress(Exception):
        stop()


def _one_line(error: BaseException) -> str:
    lines = str(error).strip().splitlines()
    return f"{type(error).__name__}: {lines[0]}" if lines else type(error).__name__


def _address(client: Client) -> str:
    scheduler = client.scheduler
    assert scheduler is not None, "the client has no scheduler"
    return str(scheduler.address)
