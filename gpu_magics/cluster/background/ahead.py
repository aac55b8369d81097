"""In the kernel: what ``%load_ext`` begins ahead of a first ``%gpucluster``, so that its start has less to wait
for: the kernel's own imports of what a start needs (distributed, dask-cuda where it is installed, dask.array,
CuPy: none of them touches CUDA), in a thread that begins once the ``%load_ext`` cell ends. Every cell, and each
magic of this package called outside a cell, waits for those imports before it runs (``wait_for_imports``): two
threads importing one package can each see it half-made. The wait is the cell's own, so an interrupt ends it.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import threading
from typing import Any

from gpu_magics.units import dropped

KERNEL_MODULES = (
    "distributed",
    "distributed.deploy.local",
    "dask.array",
    "distributed.protocol.numpy",
    "gpu_magics.cluster.managers.local",
    "gpu_magics.cluster.managers.factories",
    "gpu_magics.cluster.workers.warmup",
    "gpu_magics.cluster.telemetry.collector",
    "gpu_magics.cluster.records.writer",
)
GPU_MODULES = ("dask_cuda", "cupy", "distributed.protocol.cupy")  # where installed
# the scheduler's dashboard (where bokeh is installed): importing it was most of the scheduler's start (0.7 of 0.8 s)
DASHBOARD_MODULES = ("distributed.dashboard.scheduler",)
IMPORT_WAIT_S = 120.0

_thread: threading.Thread | None = None


def import_after_this_cell(shell: Any) -> None:
    """Once the cell that runs now ends, import ``KERNEL_MODULES`` (and ``GPU_MODULES`` that are installed) in a
    thread; once per kernel."""

    def after_cell(*_: Any) -> None:
        global _thread
        with contextlib.suppress(ValueError):
            shell.events.unregister("post_run_cell", after_cell)
        if _thread is None:
            _thread = threading.Thread(target=_import_all, name="gpu-magics-imports", daemon=True)
            _thread.start()

    shell.events.register("post_run_cell", after_cell)


def importing() -> bool:
    """Whether the imports begun ahead still go on."""
    thread = _thread
    return thread is not None and thread.is_alive() and thread is not threading.current_thread()


def wait_for_imports() -> None:
    """Return once the imports begun ahead are done (at once when none were begun); an interrupt is one line."""
    thread = _thread
    if thread is not None and thread is not threading.current_thread():
        try:
            thread.join(IMPORT_WAIT_S)
        except KeyboardInterrupt:
            from gpu_magics.cluster.background.starting import short_interrupt

            raise short_interrupt(
                "interrupted while the imports that %load_ext gpu_magics began (dask, distributed) finished; "
                "nothing of this cell ran"
            ) from None


def _import_all() -> None:
    gpu = [name for name in GPU_MODULES if _installed(name)]
    dashboard = DASHBOARD_MODULES if _installed("bokeh") else ()
    for name in (*KERNEL_MODULES, *dashboard, *gpu):
        try:
            importlib.import_module(name)
        except Exception as error:  # any failure (broken CUDA): the cell that needs it imports again, and says why
            dropped(f"importing {name} ahead", error)


def _installed(name: str) -> bool:
    try:
        return importlib.util.find_spec(name.split(".")[0]) is not None
    except (ImportError, ValueError):
        return False
