"""Imported by the forkserver that ``%gpucluster``'s workers fork from (see ``forkserver``), and nowhere
else: importing it imports what every worker imports anyway, so each worker starts with them loaded.

Each import is optional: the server must come up on any machine, and a worker imports what is missing itself.
None of these imports touches CUDA, so the workers forked afterwards create their own contexts.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import signal

from gpu_magics.text.units import dropped

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
    "gpu_magics.cluster.workers.warmup",
)

# Interrupting a notebook cell sends SIGINT to the kernel's whole process group (jupyter_client uses killpg), and
# a worker that received it would die: the cluster would lose every worker. So this server leaves the kernel's
# process group (its workers, forked from it, are in its own), and ignores SIGINT; multiprocessing hands the
# handler found here on to every process it forks. Workers still exit with the kernel: each watches a pipe
# from its parent. The kernel launched this server with SIGINT blocked (``forkserver``), so an interrupt that
# came before this point (while it imported this package) was held, and is dropped here.
signal.signal(signal.SIGINT, signal.SIG_IGN)
with contextlib.suppress(OSError):
    os.setpgid(0, 0)
signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})

# distributed's log lines and tracebacks of the workers go to the kernel's log file, not into the notebook (the
# kernel passes its standard error on to its children, and ipykernel shows that in the cell that runs).
_log = os.environ.pop("GPU_MAGICS_WORKER_LOG", None)
if _log:
    with contextlib.suppress(OSError):
        _descriptor = os.open(_log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        os.dup2(_descriptor, 2)
        os.close(_descriptor)

for _name in WORKER_MODULES:
    try:
        importlib.import_module(_name)
    except Exception as error:  # any failure (a broken CUDA install): the worker imports again, and says why
        dropped(f"importing {_name} in the worker server", error)
