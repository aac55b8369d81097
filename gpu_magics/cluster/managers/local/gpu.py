"""A cluster of GPU workers started here: dask-cuda's ``LocalCUDACluster``, one worker per chosen GPU (``--gpus``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from gpu_magics.cluster.managers import needs
from gpu_magics.cluster.managers.local import factories
from gpu_magics.cluster.managers.local.cluster import LocalClusterManager, worker_pids
from gpu_magics.cluster.options import PROG, ClusterOptions
from gpu_magics.text.errors import LineError

if TYPE_CHECKING:
    from distributed import LocalCluster


class LocalGpuManager(LocalClusterManager):
    """A ``LocalCUDACluster`` on the GPUs ``open`` chose (``gpu_ids``), one worker each."""

    _workers_are = "gpu"

    def __init__(self, options: ClusterOptions) -> None:
        super().__init__(options)
        self.gpu_ids: tuple[str, ...] = ()  # CUDA devices given to the workers, chosen by ``open``

    def open(self, reuse: bool = False) -> None:
        """Also the GPUs (``--gpus``) and dask-cuda, which GPU workers need (a line that reuses the cluster and names
        no GPUs needs none); where the cluster will start, one line here, in the cell that asked, when this kernel
        already holds memory on its GPUs."""
        super().open(reuse)
        if reuse and "gpus" not in self.options.given:
            return
        self.gpu_ids = factories.choose_gpus(self.options.local.gpus)
        if not needs.has("dask_cuda"):  # said here, before the magic returns, not by the start in the background
            raise LineError(f"{PROG}: {factories.dask_cuda_missing()}")
        if not reuse:
            from gpu_magics.cluster.workers import kernel_context

            kernel_context.report(self.gpu_ids, PROG)

    @property
    def workers_words(self) -> str:
        return "GPU workers"

    @property
    def title(self) -> str:
        return "GPU cluster"

    def _factory(self, options: ClusterOptions) -> Callable[[], LocalCluster]:
        return factories.gpu_cluster_factory(options, self.gpu_ids)

    parks = True

    def park_targets(self) -> dict[str, int]:
        """Each GPU worker's process, by the worker's name."""
        return worker_pids(self.cluster)

    def expected_workers(self) -> int:
        return len(self.gpu_ids)

    def check_scale(self, count: int, verb: str) -> None:
        """At most one worker per GPU the cluster was given."""
        if count <= len(self.gpu_ids):
            return
        if verb == "adapt":
            raise LineError(
                f"{PROG} adapt: the cluster may use {len(self.gpu_ids)} GPU(s), one worker each; give at most "
                f"{len(self.gpu_ids)}"
            )
        raise LineError(
            f"{PROG} scale {count}: the cluster may use {len(self.gpu_ids)} GPU(s) ({','.join(self.gpu_ids)}), one "
            f"worker each; start it with --gpus all --replace for more"
        )
