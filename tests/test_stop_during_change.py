"""``%gpucluster stop`` while a restart goes on in the background, through a real kernel (jupyter_client) with
real worker processes (CPU workers): the stop answers at once instead of waiting for the restarted workers, closes
the cluster (no worker process stays), and the restart ends as stopped, not as a failure a later cell reports.

The restarted workers are slow to come back: a worker preload file that sleeps, set before the cluster starts."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from tests.test_background_start import slow_preload, worker_processes
from tests.test_kernel_faults import Kernel, loaded_kernel

pytestmark = pytest.mark.slow

PRELOAD_S = 10.0  # each worker's start: the restart takes at least this long


@pytest.fixture
def kernel(tmp_path: Path) -> Any:
    with loaded_kernel(tmp_path) as started:
        yield started


def test_stop_during_a_restart_answers_at_once_and_ends_every_worker(kernel: Kernel, tmp_path: Path) -> None:
    kernel.ok(slow_preload(tmp_path, PRELOAD_S))
    pid = kernel.manager.provisioner.pid  # type: ignore[union-attr]
    kernel.ok("%gpucluster --cpu-workers 2 --name stopping")
    assert len(kernel.worker_pids()) == 2  # waits for the start
    text = kernel.ok("%gpucluster restart")
    assert "restarting 'stopping'" in text
    time.sleep(1.0)  # the old workers are gone, the new ones sleep in their preload
    workers = worker_processes(pid)
    began = time.monotonic()
    text = kernel.ok("%gpucluster stop", timeout=60)
    took = time.monotonic() - began
    assert "stopped cluster 'stopping' while it was restarting" in text, text
    assert took < PRELOAD_S - 3, f"the stop took {took:.1f} s: it waited for the restart"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and any(psutil.pid_exists(p) for p in workers):
        time.sleep(0.2)
    assert not [p for p in workers if psutil.pid_exists(p)], "a worker outlived the stop"
    text = kernel.ok("%gpucluster status")
    assert "no cluster is running" in text and "failed" not in text, text
    assert kernel.ok("print(1)").strip() == "1"  # the next cell says nothing of the stopped restart
