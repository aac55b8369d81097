"""Closing what ``%gpucluster`` started when the kernel shuts down or restarts, before ipykernel's own clean-up.

On a shutdown (or restart) request ipykernel first calls ``do_shutdown``, then terminates every child process
left in its process group, escalating from SIGTERM to SIGKILL over about 15 seconds. Multiprocessing's
resource tracker ignores SIGTERM, so without this the kernel would wait for it until the notebook server
killed the kernel, and no ``atexit`` handler (ours or the user's) would run. Here the cluster closes (its
discovery record goes with it; an adopted ``LocalCluster``, whose workers are the kernel's processes, too),
then the worker server, the resource tracker and the process that keeps the CUDA driver started stop, all
inside ``do_shutdown``: the kernel then exits by itself, at once, with status 0.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from gpu_magics.text.units import dropped

if TYPE_CHECKING:
    from distributed import Client

_WRAPPED = "_gpu_magics_original_do_shutdown"
QUIET_WAIT_S = 10.0  # how long an adopted LocalCluster's workers may take to quiet their logs before it closes
CLOSE_WAIT_S = 20.0  # how long its close may go on (ipykernel's clean-up allows tens of seconds)


def close_everything(shell: Any = None) -> None:
    """Freeze ``%gpumonitor`` panels (a saved notebook keeps their last view, marked stopped), stop the cluster
    (or disconnect from an attached one), then the worker server, resource tracker and driver's process."""
    from gpu_magics.cluster.background import start_logs
    from gpu_magics.cluster.control.verbs import stop
    from gpu_magics.cluster.workers import driver_start, forkserver

    monitor = getattr(getattr(shell, "magics_manager", None), "registry", {}).get("MonitorMagics")
    steps = [monitor.close] if monitor is not None else []
    for step in (*steps, close_local_adopted, stop.stop, forkserver.stop_server, driver_start.stop):
        try:
            step()
        except Exception as error:  # the kernel is going: a step that fails any way never stops the next one
            dropped(f"at the kernel's shutdown, {step.__qualname__}", error)
    start_logs.remove_if_empty()  # a log file with nothing in it says nothing: it goes with the kernel


def close_local_adopted() -> None:
    """An adopted cluster whose workers are this kernel's own processes (``LocalCluster`` or ``LocalCUDACluster``
    made in the notebook, ``%gpucluster --from c``) closes here, quietly: ipykernel would end its worker processes
    next with SIGTERM, and each would print a nanny's ``CancelledError`` traceback in the server's terminal. Any
    other adopted cluster (its workers elsewhere) is only detached by ``stop``, as always.

    Its workers' own logs go quiet first: a worker that closes while its heartbeat is in flight cuts that heartbeat
    off itself, and distributed logs it as an error with a traceback, however orderly the close. The close (workers
    first, then the scheduler) is then waited for, also where ``stop`` leaves it going on in the background (a
    restart or scale under way): the kernel never exits under its workers."""
    from distributed import LocalCluster

    from gpu_magics.cluster.control.kernel_cluster import in_use
    from gpu_magics.cluster.control.verbs import stop

    current = in_use()
    manager = None if current is None else current.manager
    if current is None or manager is None or manager.owned or not isinstance(manager.cluster, LocalCluster):
        return
    quiet = logging.getLogger("distributed")
    level = quiet.level
    quiet.setLevel(logging.CRITICAL)  # its nannies' words about workers ending as they close
    try:
        _quiet_workers(current.client)
        stop.stop(close=True)
        stop.wait_wound_down(CLOSE_WAIT_S)
    finally:
        quiet.setLevel(level)  # (workers that are threads of this process logged through this logger too)


def _quiet_workers(client: Client) -> None:
    """Every worker's ``distributed`` logs say nothing below CRITICAL from now on."""
    try:  # callback_timeout: the client's own bound on the call (no worker answers, nothing waits longer)
        client.run(_quiet_here, on_error="ignore", callback_timeout=QUIET_WAIT_S)
    except (OSError, TimeoutError, RuntimeError, AttributeError) as error:  # the scheduler silent or gone, the loop
        dropped("quieting the workers' logs before the close", error)  # or client closed: the close goes on


def _quiet_here() -> None:
    """Run in a worker."""
    logging.getLogger("distributed").setLevel(logging.CRITICAL)


def install(shell: Any) -> bool:
    """Run ``close_everything`` at the start of the kernel's ``do_shutdown``; ``False`` outside a kernel."""
    kernel = getattr(shell, "kernel", None)
    original: Callable[..., Any] | None = getattr(kernel, "do_shutdown", None)
    if kernel is None or original is None or hasattr(kernel, _WRAPPED):
        return False

    @functools.wraps(original)
    def do_shutdown(*args: Any, **kwargs: Any) -> Any:
        close_everything(shell)
        return original(*args, **kwargs)

    setattr(kernel, _WRAPPED, original)
    kernel.do_shutdown = do_shutdown
    return True


def uninstall(shell: Any) -> None:
    """Undo ``install`` (on ``%unload_ext``)."""
    kernel = getattr(shell, "kernel", None)
    if kernel is not None and hasattr(kernel, _WRAPPED):
        del kernel.do_shutdown  # the instance attribute: the class's method shows again
        delattr(kernel, _WRAPPED)
