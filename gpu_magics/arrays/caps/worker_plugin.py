"""The worker's side of the notebook's memory cap: a Dask worker plugin that limits the worker's allocators to its
share, given with the worker's start and again (the same name replaces it) when the notebook's SPMD ranks come or
go on its GPU."""

from __future__ import annotations

import os
from typing import Any

from distributed.diagnostics.plugin import WorkerPlugin

from gpu_magics.arrays.caps import allocators


class MemoryCapPlugin(WorkerPlugin):
    """Limits a GPU worker to its share: ``by_gpu`` maps a ``CUDA_VISIBLE_DEVICES`` entry to (share, GPU memory);
    the worker reads its own (the first entry of its ``CUDA_VISIBLE_DEVICES``) and limits every GPU it sees to it.
    A worker whose GPU is not listed (a CPU worker, another cluster's) is left alone."""

    name = "gpu-magics-memory-cap"
    idempotent = False

    def __init__(self, by_gpu: dict[str, tuple[int, int]]) -> None:
        self.by_gpu = dict(by_gpu)

    def setup(self, worker: Any) -> None:
        visible = [entry for entry in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if entry]
        found = self.by_gpu.get(visible[0]) if visible else None
        if found is None:
            return
        share, total = found
        ordinals = range(len(visible))
        allocators.limit_this_process({o: share for o in ordinals}, {o: total for o in ordinals})

    def teardown(self, worker: Any) -> None:
        allocators.limit_this_process({}, {})


def worker_share_limit() -> dict[int, int]:
    """The limits in force on this worker (for a test or ``client.run``)."""
    return allocators.limits()
