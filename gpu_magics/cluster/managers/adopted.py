"""``%gpucluster --from NAME``: a cluster manager object the user made in the notebook (dask-jobqueue's clusters,
dask-kubernetes' ``KubeCluster``, Dask Gateway's ``GatewayCluster``, ``LocalCUDACluster``, any ``SpecCluster``).
It stays the user's: ``stop`` only detaches unless told ``--close``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from IPython.core.error import UsageError

from gpu_magics.cluster.info import JobInfo
from gpu_magics.cluster.managers.base import ClusterManager
from gpu_magics.cluster.managers.squeue import job_workers, submits_with
from gpu_magics.cluster.options import PROG, ClusterOptions
from gpu_magics.units import dropped

if TYPE_CHECKING:
    from distributed import Client

    from gpu_magics.cluster.background.starting import Starting

NEEDED = ("scheduler_address", "scale", "adapt", "close")


class AdoptedManager(ClusterManager):
    """The user's cluster manager; jobs are shown where it is a dask-jobqueue cluster."""

    start_words = "could not use the cluster"  # it was running already: it did not fail to start

    def await_workers(self, client: Client, options: ClusterOptions, starting: Starting) -> str | None:
        """Wait for the workers the manager was asked for: its plan, or where it keeps none (a ``GatewayCluster``)
        what its scheduler's gateway service was asked for."""
        from gpu_magics.cluster.managers.gateway import asked_workers

        expected = self.expected_workers() or asked_workers(client)
        starting.update(expected=expected)
        return self.wait_for_workers(client, options.start_wait, expected, starting=starting)

    def jobs(self, workers: dict[str, dict[str, Any]]) -> tuple[JobInfo, ...]:
        if submits_with(self.cluster, "sbatch"):
            from gpu_magics.cluster.managers.slurm import slurm_jobs

            return slurm_jobs(self.cluster, workers)
        return _local_jobs(self.cluster, workers)


def adopt(name: str, namespace: dict[str, Any]) -> AdoptedManager:
    """The manager the variable ``name`` holds; a one-line ``UsageError`` when there is none or it is not one."""
    what = f"{PROG} --from {name}"
    if name not in namespace:
        raise UsageError(
            f"{what}: no variable {name!r} in this notebook; make the cluster manager first, like "
            f"{name} = SLURMCluster(...)"
        )
    cluster = namespace[name]
    missing = [attribute for attribute in NEEDED if not _has(cluster, attribute)]
    if missing:
        raise UsageError(
            f"{what}: {name} ({type(cluster).__name__}) is not a Dask cluster manager (it lacks "
            f"{', '.join(missing)}); give a cluster object such as SLURMCluster, KubeCluster, GatewayCluster or "
            "LocalCluster"
        )
    status = str(getattr(getattr(cluster, "status", None), "name", "")).lower()
    if status in ("closing", "closed", "failed"):
        raise UsageError(f"{what}: {name} is {status}; make a new one")
    return AdoptedManager(cluster, type(cluster).__name__)


def _has(cluster: Any, attribute: str) -> bool:
    try:
        value = getattr(cluster, attribute)
    except Exception as error:  # a property may fail any way on a cluster not running
        dropped(f"reading the cluster's {attribute}", error)
        return False
    return bool(value) if attribute == "scheduler_address" else callable(value)


def _local_jobs(cluster: Any, workers: dict[str, dict[str, Any]]) -> tuple[JobInfo, ...]:
    """The jobs of another dask-jobqueue cluster (``dask_jobqueue.local.LocalCluster``: local processes):
    running once one of its workers is up."""
    if getattr(cluster, "job_cls", None) is None:
        return ()
    names = {str(info.get("name", address)) for address, info in workers.items()}
    jobs = []
    for job_id, own in job_workers(cluster).items():
        up = tuple(sorted(own & names))
        jobs.append(JobInfo(job_id=job_id, state="running" if up else "starting", workers=up))
    return tuple(jobs)
