"""The process that starts the CUDA driver ahead of a first ``%gpucluster``: launched only where the host has real
NVIDIA GPUs, a real Python process that ends at once where the driver cannot start, and ended with the kernel.
(Starting the driver itself needs a GPU: ``tests/gpu/test_faults_gpu.py``.)"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpu_magics.cluster.control import lifecycle
from gpu_magics.cluster.workers import driver_start


@pytest.fixture(autouse=True)
def no_process_left() -> Iterator[None]:
    yield
    driver_start.stop()
    assert not driver_start.running()


@pytest.fixture
def device_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A host that looks as if the NVIDIA driver were loaded (its control device file exists)."""
    path = tmp_path / "nvidiactl"
    path.touch()
    monkeypatch.setattr(driver_start, "DEVICE_FILE", str(path))
    monkeypatch.setenv("GPU_MAGICS_SOURCE", "nvml")
    return path


def test_only_a_host_with_real_nvidia_gpus_wants_it(
    device_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert driver_start.wanted()
    monkeypatch.setenv("GPU_MAGICS_SOURCE", "fake:4")  # simulated GPUs: nothing to start
    assert not driver_start.wanted()
    monkeypatch.setenv("GPU_MAGICS_SOURCE", "nvml")
    monkeypatch.setattr(driver_start, "DEVICE_FILE", str(tmp_path / "missing"))  # no NVIDIA driver loaded
    assert not driver_start.wanted()


def test_a_host_without_gpus_launches_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(driver_start, "DEVICE_FILE", str(tmp_path / "missing"))
    monkeypatch.setattr(lifecycle.forkserver, "start_server", lambda: None)  # (the worker server is not tested here)
    lifecycle.prestart_processes()  # what %load_ext calls
    assert not driver_start.running()
    driver_start.stop()  # nothing to stop: nothing happens


def test_where_the_driver_cannot_start_the_process_ends_by_itself(device_file: Path) -> None:
    driver_start.start()  # a real Python process; this machine has no CUDA driver library
    process = driver_start._process
    assert process is not None
    assert process.wait(timeout=60) == 1
    assert not driver_start.running()


def test_keep_started_returns_at_once_without_a_driver_and_never_reads() -> None:
    """Its standard input is a pipe nobody closes: a read would wait for ever, so returning shows it never read."""
    read_end, write_end = os.pipe()
    returned: list[int] = []
    with open(read_end, "rb") as unread:

        def keep() -> None:
            returned.append(driver_start.keep_started("libcuda-that-is-not-here.so.1", until_closed=unread))
            returned.append(driver_start.keep_started("libc.so.6", until_closed=unread))  # a library, not the driver

        thread = threading.Thread(target=keep, daemon=True)
        thread.start()
        thread.join(120)
        os.close(write_end)  # (a read under way ends now)
        thread.join(10)
    assert returned == [1, 1]


def test_a_child_forked_from_the_kernel_lets_go_of_the_pipe() -> None:
    """A child forked without exec (multiprocessing's ``fork``) that outlives the kernel must not keep the driver's
    process: it closes its copy of the pipe, so the process ends when the kernel closes its own."""
    import subprocess
    import sys

    # a stand-in with the real process's behaviour: it ends once its standard input closes
    stand_in = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.buffer.read()"], stdin=subprocess.PIPE)
    driver_start._process = stand_in
    driver_start.let_go_in_children()
    child = os.fork()
    if child == 0:  # the child outlives the kernel's close below (and the stop's wait)
        time.sleep(600)
        os._exit(0)
    try:
        assert driver_start._process is stand_in  # the kernel keeps its own end
        driver_start.stop(timeout=120)  # had the child kept its copy of the pipe: killed after 120 s, not 0
        assert stand_in.returncode == 0  # it ended by itself once the kernel closed its end, the child alive
    finally:
        os.kill(child, 9)
        os.waitpid(child, 0)
