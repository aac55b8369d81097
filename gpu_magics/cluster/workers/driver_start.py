"""The CUDA driver started on this host's GPUs ahead of a first ``%gpucluster``, in a process of its own.

The first process on a host that starts the CUDA driver on a GPU pays that GPU's own start, even with persistence
mode on: about 0.3 s per GPU, one GPU after another whatever process asks (1.2 s for 4 H100s); processes that
start it later, while another keeps it started, skip that part. A ``%gpucluster`` in a fresh kernel paid it inside
the start, where the kernel's own context and each worker's waited on it: every worker warm 2.6 s after the magic
on 4 H100s, 1.7 s with the driver started ahead.

``start`` (called by ``%load_ext``, beside the worker server) launches a small Python process that starts the
driver (``cuInit``: no context, no GPU memory, nothing NVML lists), then only waits for its standard input to
close: it ends with the kernel, or at ``stop`` (children the kernel forks close their copy of the pipe, so none
keeps it). The kernel itself does not start the driver ahead: a process that
did could no longer fork children that use CUDA. Only on a host with NVIDIA's device files and real GPUs (not
simulated ones); a failure of any kind only leaves the first start as slow as before.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import subprocess
import sys
from typing import IO

DEVICE_FILE = "/dev/nvidiactl"  # present where the NVIDIA driver is loaded
DRIVER_LIBRARY = "libcuda.so.1"
STOP_WAIT_S = 5.0

_process: subprocess.Popen[bytes] | None = None
_hooked = False  # whether children this process forks let go of the pipe (``let_go_in_children``)


def wanted() -> bool:
    """Whether this host has real NVIDIA GPUs to start the driver on (simulated GPUs have nothing to start)."""
    from gpu_magics.monitor.sources import source_from_env

    return os.path.exists(DEVICE_FILE) and source_from_env().kind == "nvml"


def start() -> None:
    """Launch the process that starts the driver and keeps it started (unless it runs already); returns at once."""
    global _process
    if (_process is not None and _process.poll() is None) or not wanted():
        return
    _process = subprocess.Popen(
        [sys.executable, "-m", __name__],
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # an interrupt of the notebook's cell (SIGINT to the kernel's group) leaves it
    )
    let_go_in_children()


def let_go_in_children() -> None:
    """Have every child this process forks without exec (``multiprocessing``'s ``fork``) close its copy of the
    pipe at once: else such a child outliving the kernel would keep the driver's process too."""
    global _hooked
    if not _hooked:
        os.register_at_fork(after_in_child=_let_go)
        _hooked = True


def _let_go() -> None:
    global _process
    process, _process = _process, None
    if process is not None and process.stdin is not None:
        with contextlib.suppress(OSError):
            process.stdin.close()  # only this child's copy: the kernel's end stays open


def running() -> bool:
    """Whether the process keeps the driver started now."""
    return _process is not None and _process.poll() is None


def stop(timeout: float = STOP_WAIT_S) -> None:
    """End the process (it exits once its standard input closes), within ``timeout``."""
    global _process
    process, _process = _process, None
    if process is None:
        return
    with contextlib.suppress(OSError):
        if process.stdin is not None:
            process.stdin.close()
    try:
        process.wait(timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def keep_started(library: str = DRIVER_LIBRARY, until_closed: IO[bytes] | None = None) -> int:
    """In the process ``start`` launched: start the driver, then wait until ``until_closed`` (standard input)
    closes. Returns 0, or 1 at once where the driver cannot be started (no library, no GPU)."""
    try:
        started = ctypes.CDLL(library).cuInit(0) == 0
    except (OSError, AttributeError):  # no driver library here, or not the CUDA driver
        started = False
    if not started:
        return 1
    (until_closed or sys.stdin.buffer).read()
    return 0


if __name__ == "__main__":
    sys.exit(keep_started())
