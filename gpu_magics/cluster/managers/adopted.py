"""``%gpucluster --from NAME``: a cluster manager object the user made in the notebook (dask-jobqueue's clusters,
dask-kubernetes' ``KubeCluster``, Dask Gateway's ``GatewayCluster``, ``LocalCUDACluster``, any ``SpecCluster``).
It stays the user's: ``stop`` only detaches unless told ``--close``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gpu_magics.cluster.info import JobInfo
from gpu_magics.cluster.managers.base import ClusterManager, same_address
from gpu_magics.cluster.managers.slurm.squeue import job_workers, submits_with
from gpu_magics.cluster.options import PROG, ClusterOptions
from gpu_magics.text.errors import LineError
from gpu_magics.text.units import dropped

if TYPE_CHECKING:
    from distributed import Client

    from gpu_magics.cluster.background.starting import Starting

NEEDED = ("scheduler_address", "scale", "adapt", "close")


class AdoptedManager(ClusterManager):
    """The user's cluster manager; jobs are shown where it is a dask-jobqueue cluster. Made for a ``--from NAME``
    line (``named``), ``open`` looks the variable up in ``namespace``."""

    _start_words = "could not use the cluster"  # it was running already: it did not fail to start

    def __init__(
        self, cluster: Any, label: str | None, named: str | None = None, namespace: dict[str, Any] | None = None
    ) -> None:
        super().__init__(cluster, label)
        self._named = named
        self._namespace = namespace if namespace is not None else {}

    @property
    def source(self) -> str:
        return f"adopted {self.label or 'cluster manager'}, not started here"

    @property
    def taken(self) -> str:
        return "adopted at"

    @property
    def title(self) -> str:
        return self.label or "cluster manager"

    def open(self, reuse: bool = False) -> None:
        """The variable the line names holds a cluster manager that runs (also where a cluster runs already: a line
        that names nothing is refused, whatever runs)."""
        del reuse
        if self._named is not None:
            self.cluster = find(self._named, self._namespace)
            self.label = type(self.cluster).__name__

    def same_as(self, running: ClusterManager | None, address: str | None) -> bool:
        """The same object as the one adopted, or a manager of the scheduler in use."""
        if isinstance(running, AdoptedManager) and running.cluster is self.cluster:
            return True
        return address is not None and same_address(str(self.cluster.scheduler_address), address)

    def start(self, options: ClusterOptions, starting: Starting) -> Client:
        from gpu_magics.cluster.managers import attach

        return attach.connect_manager(self.cluster, options.start_timeout)

    def await_workers(self, client: Client, options: ClusterOptions, starting: Starting) -> str | None:
        """Wait for the workers the manager was asked for: its plan, or where it keeps none (a ``GatewayCluster``)
        what its scheduler's gateway service was asked for."""
        from gpu_magics.cluster.managers.gateway.manager import asked_workers

        expected = self.expected_workers() or asked_workers(client)
        starting.update(expected=expected)
        return self._wait_for_workers(client, options.start_wait, expected, starting=starting)

    def jobs(self, workers: dict[str, dict[str, Any]]) -> tuple[JobInfo, ...]:
        if submits_with(self.cluster, "sbatch"):
            from gpu_magics.cluster.managers.slurm.manager import slurm_jobs

            return slurm_jobs(self.cluster, workers)
        return _local_jobs(self.cluster, workers)

    def finish(self, name: str, keep: bool | None = None) -> str:
        """Close the user's manager only where told (``keep`` False: ``stop --close``); else detach."""
        if not (keep is False or (keep is None and self.owned)):
            return f"%gpucluster: detached from {name!r} ({self.label}); it keeps its workers (stop --close closes it)"
        self.cluster.close()
        return f"%gpucluster: stopped cluster {name!r} ({self.label}: closed)"


def adopt(name: str, namespace: dict[str, Any]) -> AdoptedManager:
    """The manager the variable ``name`` holds; a one-line ``LineError`` when there is none or it is not one."""
    manager = AdoptedManager(None, None, name, namespace)
    manager.open()
    return manager


def find(name: str, namespace: dict[str, Any]) -> Any:
    """The cluster manager the variable ``name`` holds; a one-line ``LineError`` when there is none or it is not
    one, or it is closed."""
    what = f"{PROG} --from {name}"
    if name not in namespace:
        raise LineError(
            f"{what}: no variable {name!r} in this notebook; make the cluster manager first, like "
            f"{name} = SLURMCluster(...)"
        )
    cluster = namespace[name]
    missing = [attribute for attribute in NEEDED if not _has(cluster, attribute)]
    if missing:
        raise LineError(
            f"{what}: {name} ({type(cluster).__name__}) is not a Dask cluster manager (it lacks "
            f"{', '.join(missing)}); give a cluster object such as SLURMCluster, KubeCluster, GatewayCluster or "
            "LocalCluster"
        )
    status = str(getattr(getattr(cluster, "status", None), "name", "")).lower()
    if status in ("closing", "closed", "failed"):
        raise LineError(f"{what}: {name} is {status}; make a new one")
    return cluster


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
