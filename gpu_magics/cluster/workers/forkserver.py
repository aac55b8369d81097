"""How ``%gpucluster`` makes worker processes: forked from a server that has already imported what they need.

By default distributed spawns each worker: a fresh interpreter that imports distributed, dask-cuda, dask.array
and CuPy before it can do anything, a second or more per worker. Here the workers fork from multiprocessing's
forkserver instead. ``start_server`` launches it at the very beginning of ``%gpucluster``, so its imports run
in another process while this one imports dask-cuda and starts the scheduler; each worker then starts from a
fork with those modules loaded. Importing CuPy creates no CUDA context, so every worker still creates its own,
on its own GPU, after the fork. The server stays up (idle, no GPU memory) for restarts and later clusters and
exits with this process.

An interrupt of a notebook cell is a SIGINT to the kernel's whole process group, and the server is launched in that
group: it begins with SIGINT blocked (launched from a thread that blocks it), and its preload ignores SIGINT and
leaves the group before it lets SIGINT through. An interrupt of the kernel while it launches the server waits until
the launch is complete, so the server is never left half launched.
"""

from __future__ import annotations

import contextlib
import importlib.util
import multiprocessing
import multiprocessing.forkserver
import multiprocessing.resource_tracker
import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

METHOD_KEY = "distributed.worker.multiprocessing-method"
PRELOAD_MODULE = "gpu_magics.cluster.workers.forkserver_preload"  # imported by the server only
WORKER_LOG_ENV = "GPU_MAGICS_WORKER_LOG"  # where the server sends its standard error (and its workers')


def start_server() -> None:
    """Launch the forkserver (unless it runs already) to import ``PRELOAD_MODULE``; returns at once."""
    from gpu_magics.cluster.background import start_logs

    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload([PRELOAD_MODULE])
    environment = _pre_spawn_environment()
    with contextlib.suppress(OSError):
        environment[WORKER_LOG_ENV] = str(start_logs.log_path())
    multiprocessing.resource_tracker.ensure_running()  # first: its launch lets SIGINT through again afterwards
    with _environment(environment), _interrupts_held():
        multiprocessing.forkserver.ensure_running()


def stop_server(timeout: float = 5.0) -> None:
    """Stop the forkserver and the resource tracker multiprocessing started beside it, within ``timeout``.

    Called when the kernel shuts down, after the cluster has closed: the resource tracker ignores SIGINT and
    SIGTERM, so ipykernel's clean-up of its child processes would otherwise wait for it until the kernel is
    killed, and the kernel's own exit handlers would never run.
    """
    deadline = time.monotonic() + timeout
    server: Any = multiprocessing.forkserver._forkserver
    pid = getattr(server, "_forkserver_pid", None)
    if pid is not None:
        # multiprocessing's own stop waits for the server without a limit, and the server waits for every process
        # it forked (each holds its "alive" pipe): a worker left running would hang this stop for good
        with contextlib.suppress(OSError, TypeError):
            os.close(server._forkserver_alive_fd)
        address = getattr(server, "_forkserver_address", None)
        server._forkserver_alive_fd = server._forkserver_pid = server._forkserver_address = None
        _end(pid, deadline)
        if isinstance(address, str) and not address.startswith("\0"):
            with contextlib.suppress(OSError):
                os.unlink(address)
    tracker: Any = multiprocessing.resource_tracker._resource_tracker
    fd, pid = getattr(tracker, "_fd", None), getattr(tracker, "_pid", None)
    if fd is None or pid is None:
        return
    with contextlib.suppress(OSError):
        os.close(fd)  # its last writer gone, the tracker cleans up and exits
    tracker._fd = None
    _end(pid, deadline)
    tracker._pid = None


def _end(pid: int, deadline: float) -> None:
    """Wait for the child ``pid`` (asked to exit) until ``deadline``; then it is ours to end: killed."""
    while time.monotonic() < deadline:
        try:
            done, _ = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            return
        if done:
            return
        time.sleep(0.02)
    with contextlib.suppress(OSError):  # someone else still holds its pipe
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)


def config() -> dict[str, Any]:
    """The dask config under which Nanny processes fork from the server started by ``start_server``."""
    return {METHOD_KEY: "forkserver"}


def mark_preload_set() -> None:
    """Tell distributed (once it is imported) that the forkserver's preload is taken care of: its own set-up
    would first import every optional package in this process, for a server that is already running."""
    import distributed.utils

    distributed.utils._forkserver_preload_set = True


def _pre_spawn_environment() -> dict[str, str]:
    """What distributed sets before it spawns a worker (one thread per math library, malloc trimming, a
    fixed hash seed); a forked worker inherits the server's environment, so the server gets them. Read from
    distributed's defaults file and the user's dask config, without importing distributed (that takes a while)."""
    import dask

    wanted = dict(_distributed_default("nanny", "pre-spawn-environ"))
    wanted.update(dask.config.get("distributed.nanny.pre-spawn-environ", default=None) or {})
    environment = {key: os.environ.get(key, str(value)) for key, value in wanted.items() if value is not None}
    if environment.get("PYTHONHASHSEED") in (None, "0"):
        environment["PYTHONHASHSEED"] = "6640"  # distributed's own choice, for consistent hashing
    return environment


def _distributed_default(*path: str) -> Any:
    """A value from distributed's ``distributed.yaml`` (``{}`` when it cannot be read)."""
    spec = importlib.util.find_spec("distributed")
    if spec is None or not spec.submodule_search_locations:
        return {}
    try:
        import yaml

        defaults = yaml.safe_load((Path(next(iter(spec.submodule_search_locations))) / "distributed.yaml").read_text())
        value: Any = defaults["distributed"]
        for key in path:
            value = value[key]
    except (OSError, LookupError, TypeError):  # the file unreadable, or without the key
        return {}
    return value if value is not None else {}


@contextlib.contextmanager
def _interrupts_held() -> Iterator[None]:
    """SIGINT blocked in this thread (a process launched here begins with it blocked), and, in the main thread,
    an interrupt that comes meanwhile raised once the block ends."""
    if threading.current_thread() is not threading.main_thread():
        blocked = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        try:
            yield
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
        return
    held: list[Any] = []
    handler = signal.signal(signal.SIGINT, lambda _signal, frame: held.append(frame))
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)  # one that came meanwhile is held now
        signal.signal(signal.SIGINT, handler)  # (runs what is pending first)
    if held:
        if callable(handler):
            handler(signal.SIGINT, held[0])
        elif handler == signal.SIG_DFL:
            raise KeyboardInterrupt


@contextlib.contextmanager
def _environment(values: dict[str, str]) -> Iterator[None]:
    saved = {key: os.environ.get(key) for key in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
