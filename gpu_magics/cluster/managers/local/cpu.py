"""A cluster of CPU workers started here (``--cpu-workers N``): distributed's ``LocalCluster``, as many worker
processes as this host can start."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from gpu_magics import gpus
from gpu_magics.cluster.managers.local import factories
from gpu_magics.cluster.managers.local.cluster import LocalClusterManager
from gpu_magics.cluster.options import PROG, ClusterOptions

if TYPE_CHECKING:
    from distributed import LocalCluster


class LocalCpuManager(LocalClusterManager):
    """A ``LocalCluster`` of ``--cpu-workers`` worker processes (CPU workers, whatever GPUs the host has)."""

    _workers_are = "cpu"

    def _check_count(self) -> None:
        if self.options.cpu_workers is not None:
            factories.check_cpu_workers(self.options.cpu_workers, f"{PROG} --cpu-workers")

    @property
    def workers_words(self) -> str:
        return "CPU workers"

    @property
    def title(self) -> str:
        return "CPU cluster"

    @property
    def why_not_parkable(self) -> str:
        said = "its workers are CPU workers: they hold no GPU memory to give back"
        if gpus.inventory().simulated:  # the command that gives workers that park, on this machine
            said += f"; {PROG} --replace starts one worker per simulated GPU instead, which parks"
        return said

    def _factory(self, options: ClusterOptions) -> Callable[[], LocalCluster]:
        return factories.cpu_cluster_factory(options)

    def expected_workers(self) -> int:
        return 0  # no plan: the start asks for the line's --cpu-workers

    def check_scale(self, count: int, verb: str) -> None:
        """At most as many worker processes as this host can start."""
        factories.check_cpu_workers(count, f"{PROG} {verb}")
