"""Imported by the forkserver that ``%gpucluster``'s workers fork from (see ``worker_processes``), and nowhere
else: importing it imports what every worker imports anyway, so each worker starts with them loaded.

Each import is optional: the server must come up on any machine, and a worker imports what is missing itself.
None of these imports touches CUDA, so the workers forked afterwards create their own contexts.
"""

from __future__ import annotations

import contextlib
import importlib

WORKER_MODULES = (
    "numpy",
    "dask.array",
    "distributed",
    "distributed.nanny",
    "distributed.worker",
    "distributed.http.health",
    "distributed.http.statics",
    "distributed.http.worker.prometheus.core",
    "distributed.diagnostics.nvml",
    "distributed.protocol.numpy",
    "distributed.protocol.cupy",
    "cupy",
    "dask_cuda",
    "dask_cuda.initialize",
    "dask_cuda.device_host_file",
    "gpu_magics.cluster.warmup",
)

for _name in WORKER_MODULES:
    with contextlib.suppress(Exception):
        importlib.import_module(_name)
