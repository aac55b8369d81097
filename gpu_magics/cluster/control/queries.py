"""What may be asked about the cluster in use without changing it: the one interface through which ``gpurun``
(and the magics) reach the cluster engine. The one thing told through it: which session backend plain cells
use (``tell_plain_cells``), for the cluster's record. The verbs start and stop the cluster these answer about.

The dependency runs one way: ``gpurun`` imports this, nothing in ``cluster`` imports ``gpurun``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from gpu_magics.cluster.control.kernel_cluster import in_use, under_way, unreported
from gpu_magics.cluster.control.owner import on_change
from gpu_magics.cluster.options import PROG
from gpu_magics.cluster.reading import inspection
from gpu_magics.cluster.reading.running import ActiveCluster, WorkersKind
from gpu_magics.text import hints
from gpu_magics.text.errors import NoCluster, ServiceError

__all__ = [
    "active",
    "active_client",
    "adapting",
    "cpu_workers_asked",
    "describe_hardware",
    "expected_gpu_workers",
    "gpu_worker_devices",
    "has_gpu_workers",
    "kernel_held_by_uuid",
    "local_scheduler",
    "no_cluster_message",
    "on_change",
    "require_client",
    "settle_start",
    "split_workers_by_gpu",
    "start_under_way",
    "telemetry",
    "tell_plain_cells",
    "worker_count",
    "workers_kind",
]

if TYPE_CHECKING:
    from distributed import Client

    from gpu_magics.cluster.background.starting import Starting
    from gpu_magics.cluster.telemetry.collector import ClusterTelemetry


def start_cluster_command() -> str:
    """The command that starts a cluster on this machine: ``%gpucluster`` (real GPUs, CuPy and dask-cuda) or
    ``%gpucluster --cpu-workers N``."""
    from gpu_magics.cluster.managers.local.factories import gpu_cluster_ready

    return hints.PROG if gpu_cluster_ready() else hints.cpu_cluster_command()


def no_cluster_message() -> str:
    """One line: no cluster runs, and the commands that start one here (or attach to a scheduler)."""
    return (
        f"no cluster is running: start one with {start_cluster_command()}, "
        f"or attach with {PROG} --address <scheduler address>"
    )


def active() -> ActiveCluster | None:
    """The cluster in use, or ``None``."""
    return in_use()


def active_client() -> Client | None:
    """The ``Client`` of the cluster in use, or ``None`` when there is none."""
    current = in_use()
    return None if current is None else current.client


def start_under_way() -> Starting | None:
    """The cluster's start (restart, scale) while it goes on (``None``: none is under way)."""
    return under_way()


def settle_start() -> None:
    """Wait for a start (restart, scale) under way; a start's failure, if nobody said it yet, as one line."""
    pending = under_way() or unreported()
    if pending is not None:
        pending.wait()


_before_direct_work: list[Callable[[], None]] = []


def before_direct_work(hook: Callable[[], None]) -> None:
    """Have ``hook`` run before work reaches the workers without their scheduler (``direct_work_ahead``): a module
    above this one registers what must happen first (``verbs.resume``: a parked cluster resumes)."""
    _before_direct_work.append(hook)


def direct_work_ahead() -> None:
    """Work is about to reach the workers of the cluster in use without passing its scheduler (an SPMD cell's
    ranks): what must come first does (a parked cluster resumes, its line said in the cell; its failure raised)."""
    for hook in _before_direct_work:
        hook()


def require_client() -> Client:
    """The ``Client`` of the cluster in use (once a start under way is done); a ``UsageError`` pointing to
    ``%gpucluster`` without one."""
    settle_start()
    current = in_use()
    if current is None:
        raise NoCluster(no_cluster_message())
    status = current.client.status
    if status == "connecting":  # it was running: the connection to its scheduler was lost
        raise ServiceError(
            f"the cluster {current.name!r} does not answer: its scheduler connection was lost and the client is "
            f"reconnecting; wait, or run {PROG} --replace"
        )
    if status != "running":
        raise ServiceError(
            f"the cluster {current.name!r} no longer answers ({status}); run {PROG} --replace to start a new one"
        )
    return current.client


def local_scheduler(client: Client) -> Any:
    """The ``Scheduler`` object of ``client``'s cluster where it runs in this process (read without a round trip),
    else ``None``."""
    return inspection.local_scheduler(client)


def has_gpu_workers() -> bool:
    """Whether the cluster in use has workers with a GPU."""
    return bool(split_workers_by_gpu()[0])


def split_workers_by_gpu() -> tuple[set[str], set[str]]:
    """The addresses of the workers with a GPU and of those without one (the workers' own reports, and for
    a cluster started here its kind); two empty sets without a cluster or an answer."""
    current = in_use()
    if current is None or current.client.status != "running":
        return set(), set()
    try:
        workers = inspection.scheduler_workers(current.client)
    except (OSError, RuntimeError):  # the scheduler's comm failed or timed out; the client's loop is gone
        return set(), set()
    declared = current.manager.declared_workers
    if declared is not None:  # as the manager asked for them: GPU or CPU workers, whatever the host has
        return (set(workers), set()) if declared == "gpu" else (set(), set(workers))
    reported = current.telemetry.worker_gpus_alone() if current.telemetry is not None else {}
    with_gpu = set()
    for address, info in workers.items():
        name = str(info.get("name", address))
        seen = current.devices.get(name, {})
        if seen.get("cupy") is False:  # a GPU its chunks cannot use (no CuPy there): a CPU worker for arrays
            continue
        if (reported.get(address) or ("", ()))[1] or seen.get("gpu_name"):
            with_gpu.add(address)
    return with_gpu, set(workers) - with_gpu


def workers_kind() -> WorkersKind:
    """What the workers of the cluster in use are (``ActiveCluster.workers_kind``: as its manager asked for them,
    else as they said); ``cpu`` without a cluster."""
    current = in_use()
    return "cpu" if current is None else current.workers_kind


def cpu_workers_asked() -> bool:
    """Whether the workers of the cluster in use were asked for as CPU workers (a CPU cluster started here,
    ``--cpu-workers``): they stay CPU workers on a host with GPUs. A GPU without CuPy still counts as a GPU here."""
    current = in_use()
    return current is not None and current.manager.declared_workers == "cpu"


def telemetry() -> ClusterTelemetry | None:
    """The GPU reports of the cluster in use (``None`` without a cluster, or with telemetry off)."""
    current = in_use()
    return None if current is None else current.telemetry


def kernel_held_by_uuid() -> dict[str, tuple[int | None, bool]]:
    """What this kernel itself holds on its GPUs, by UUID (bytes, whether that counts its CUDA context)."""
    from gpu_magics.cluster.records import kernel_report

    return kernel_report.held_by_uuid()


def describe_hardware() -> str:
    """``"4x NVIDIA H200 (4 workers)"``, ``"2 CPU workers x 1 thread"``, or ``"no cluster"``."""
    current = in_use()
    if current is None:
        return "no cluster"
    if current.client.status != "running":  # asking a scheduler that went away waits for its timeouts
        return f"cluster {current.name!r} ({current.client.status})"
    try:
        workers = inspection.scheduler_workers(current.client)
    except (OSError, RuntimeError):  # the scheduler's comm failed or timed out; the client's loop is gone
        workers = {}
    reported = current.telemetry.worker_gpus_alone() if current.telemetry is not None else None
    return inspection.hardware(
        current.manager.declared_workers, current.devices, workers, reported, current.manager.hardware_note
    )


def gpu_worker_devices(client: Client) -> dict[str, str]:
    """Worker address -> GPU model, for each worker of ``client``'s cluster that has a GPU."""
    current = in_use()
    cached = current.devices if current is not None and current.client is client else {}
    skip_gpu = current is not None and current.client is client and current.manager.declared_workers == "cpu"
    found = {}
    for worker in inspection.worker_infos(inspection.scheduler_workers(client), cached, gpu=not skip_gpu):
        if worker.gpu_name:
            found[worker.address] = worker.gpu_name
    return found


def worker_count() -> int | None:
    """How many workers the cluster in use has now (``None`` without a cluster or an answer)."""
    current = in_use()
    if current is None or current.client.status != "running":
        return None
    try:
        return len(inspection.scheduler_workers(current.client))
    except (OSError, RuntimeError):  # the scheduler's comm failed or timed out; the client's loop is gone
        return None


def worker_threads(addresses: set[str]) -> int:
    """The threads of the workers at ``addresses`` (every worker's where it is empty); 0 without a cluster or an
    answer."""
    current = in_use()
    if current is None or current.client.status != "running":
        return 0
    try:
        workers = inspection.scheduler_workers(current.client)
    except (OSError, RuntimeError):  # the scheduler's comm failed or timed out; the client's loop is gone
        return 0
    chosen = [info for address, info in workers.items() if not addresses or address in addresses]
    return sum(int(info.get("nthreads", 1)) for info in chosen)


def adapting() -> tuple[int, int] | None:
    """The bounds the cluster in use adapts between (``adapt MIN MAX``), or ``None`` when it does not adapt."""
    current = in_use()
    return None if current is None else current.manager.adaptive


def expected_gpu_workers() -> bool:
    """Whether the workers an adaptive cluster at zero will start have GPUs: the kind a cluster started here
    has, else what its workers said before they went (``--cpu-workers``: no)."""
    current = in_use()
    return current is not None and current.workers_kind == "gpu"


def tell_plain_cells(backend: str | None) -> None:
    """Note in the record of the cluster in use (the side panel's card) the session backend plain cells run on
    (``None``: dask's own settings)."""
    from gpu_magics.cluster.control import record_writer

    record_writer.set_plain_cells(backend)


_rank_parks: list[Callable[[], Any]] = []


def ranks_take_part_in_parks(finder: Callable[[], Any]) -> None:
    """Have ``finder`` give a park this kernel's SPMD ranks (an ``spmd.kernel.rank_parking.RankPark``, or ``None``
    where there are none): the SPMD side registers it, so that the park needs nothing of it."""
    if finder not in _rank_parks:
        _rank_parks.append(finder)


def rank_park() -> Any:
    """This kernel's SPMD ranks as a park sees them (``None``: none)."""
    for finder in _rank_parks:
        found = finder()
        if found is not None:
            return found
    return None
