"""A cluster started here for simulated GPUs (``$GPU_MAGICS_SOURCE=fake:N``): one CPU worker process per simulated
GPU, standing for the GPU worker a real GPU would get. Cells run on the CPU (simulated GPUs never run cells), and
``%gpucluster park`` / ``resume`` go through the CUDA driver's stand-in (``workers.checkpoint``), so that parking
can be tried on a machine without a GPU."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING

from gpu_magics import gpus
from gpu_magics.cluster.managers.local import factories
from gpu_magics.cluster.managers.local.cluster import worker_pids
from gpu_magics.cluster.managers.local.cpu import LocalCpuManager
from gpu_magics.cluster.options import PROG, ClusterOptions
from gpu_magics.text.errors import LineError

if TYPE_CHECKING:
    from distributed import LocalCluster

PARK_NOTE = " (simulated GPUs, through the CUDA driver's stand-in)"


def simulated() -> bool:
    """Whether this kernel's GPUs are simulated (read from ``$GPU_MAGICS_SOURCE``; no GPU is read)."""
    return gpus.inventory().simulated


class SimulatedGpuManager(LocalCpuManager):
    """``%gpucluster`` where the GPUs are simulated: one CPU worker per chosen simulated GPU (``--gpus``), parkable
    through the driver's stand-in."""

    park_note = PARK_NOTE

    def __init__(self, options: ClusterOptions) -> None:
        super().__init__(options)
        self.gpu_ids: tuple[str, ...] = ()  # the simulated GPUs the workers stand for, chosen by ``open``

    def open(self, reuse: bool = False) -> None:
        """Also the simulated GPUs the line names (``--gpus``), one worker each."""
        super().open(reuse)
        if reuse and "gpus" not in self.options.given:
            return
        self.gpu_ids = choose_simulated(self.options.local.gpus)

    @property
    def workers_words(self) -> str:
        return "workers for simulated GPUs"

    @property
    def title(self) -> str:
        return "GPU cluster (simulated GPUs)"

    @property
    def source(self) -> str:
        return "started here, one worker per simulated GPU (cells run on the CPU)"

    def _factory(self, options: ClusterOptions) -> Callable[[], LocalCluster]:
        return factories.cpu_cluster_factory(dataclasses.replace(options, cpu_workers=len(self.gpu_ids)))

    parks = True

    def park_targets(self) -> dict[str, int]:
        """Each worker's process, by the worker's name (the stand-in keeps their states)."""
        return worker_pids(self.cluster)

    def expected_workers(self) -> int:
        return len(self.gpu_ids)

    def check_scale(self, count: int, verb: str) -> None:
        """At most one worker per simulated GPU the cluster was given."""
        if count > len(self.gpu_ids):
            raise LineError(
                f"{PROG} {verb} {count}: the cluster has {len(self.gpu_ids)} simulated GPU(s), one worker each; give "
                f"at most {len(self.gpu_ids)}"
            )


def choose_simulated(indices: tuple[int, ...] | None) -> tuple[str, ...]:
    """The simulated GPUs ``--gpus`` names (all by default), as the inventory numbers them."""
    visible = gpus.inventory().devices()
    if not visible:
        raise LineError(f"{PROG}: $GPU_MAGICS_SOURCE simulates no GPU here ({gpus.inventory().unavailable_reason()})")
    if indices is None:
        return tuple(device.cuda_id or str(device.index) for device in visible)
    missing = [index for index in indices if index >= len(visible)]
    if missing:
        raise LineError(
            f"{PROG} --gpus {','.join(map(str, indices))}: no simulated GPU {','.join(map(str, missing))} here; "
            f"the {len(visible)} simulated GPU(s) are {', '.join(str(index) for index in range(len(visible)))}"
        )
    return tuple(visible[index].cuda_id or str(visible[index].index) for index in indices)
