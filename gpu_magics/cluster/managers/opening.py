"""Making the ``ClusterManager`` a ``%gpucluster`` line asks for: a cluster started here (GPU or CPU workers), a
scheduler to attach to (``--address``), SLURM jobs (``--slurm``), the user's object (``--from NAME``) or a Dask
Gateway's cluster (``--gateway``)."""

from __future__ import annotations

from typing import Any

from IPython.core.error import UsageError

from gpu_magics.cluster.managers.base import ClusterManager
from gpu_magics.cluster.options import PROG, ClusterOptions


def chosen_gpus(options: ClusterOptions) -> tuple[str, ...]:
    """The GPUs a GPU cluster started here would use (``--gpus``); none for other kinds. Checked before a running
    cluster stops, so a bad ``--gpus`` leaves it running."""
    if options.kind != "gpu":
        return ()
    from gpu_magics.cluster.managers import factories, needs

    chosen = factories.choose_gpus(options.gpus)
    if not needs.has("dask_cuda"):  # said here, before the magic returns, not by the start in the background
        raise UsageError(f"{PROG}: {factories.dask_cuda_missing()}")
    return chosen


def check_line(options: ClusterOptions) -> None:
    """What a start as ``options`` ask would fail on, checked here, before anything stops or starts and before the
    magic returns (a start in the background would only fail later): the packages its kind needs (dask-cuda:
    ``chosen_gpus``, after the GPUs), the protocol, a count of CPU workers this host can start. One-line
    ``UsageError``s."""
    from gpu_magics.cluster.managers import needs

    if options.kind in ("gpu", "cpu", "slurm"):
        needs.comm_protocol(options.protocol, PROG)
    if options.kind == "slurm" and not needs.has("dask_jobqueue"):
        from gpu_magics.cluster.managers.slurm import INSTALL, WHAT

        raise UsageError(f"{WHAT}: dask-jobqueue is not installed ({INSTALL})")
    if options.kind == "cpu" and options.cpu_workers is not None:
        from gpu_magics.cluster.managers.factories import check_cpu_workers

        check_cpu_workers(options.cpu_workers, f"{PROG} --cpu-workers")


def open_early(options: ClusterOptions) -> ClusterManager | None:
    """The manager for lines whose mistakes the manager's service finds (a gateway: its address, the user's
    access, its options), made before a running cluster stops so that a bad line leaves it running; ``None`` for
    the others (``open_manager`` makes them)."""
    if options.kind != "gateway":
        return None
    from gpu_magics.cluster.managers.gateway import open_gateway

    return open_gateway(options)


def open_manager(options: ClusterOptions, namespace: dict[str, Any], gpu_ids: tuple[str, ...] = ()) -> ClusterManager:
    """The manager for ``options`` (``--from`` looks its name up in ``namespace``; ``gpu_ids``: the GPUs chosen
    for a GPU cluster started here); one-line ``UsageError``s."""
    if options.kind in ("gpu", "cpu"):
        from gpu_magics.cluster.managers.local import LocalManager

        return LocalManager(options.kind, gpu_ids)
    if options.kind == "attached":
        from gpu_magics.cluster.managers.attached import AttachedManager

        assert options.address is not None
        return AttachedManager(options.address)
    if options.kind == "gateway":
        from gpu_magics.cluster.managers.gateway import open_gateway

        return open_gateway(options)
    if options.from_name is not None:
        from gpu_magics.cluster.managers.adopted import adopt

        return adopt(options.from_name, namespace)
    from gpu_magics.cluster.managers import slurm

    return slurm.start(options)
