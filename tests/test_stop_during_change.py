"""``%gpucluster stop`` while a restart goes on in the background, through a real kernel (jupyter_client) with
real worker processes (CPU workers): the stop answers at once instead of waiting for the restarted workers, closes
the cluster (no worker process stays), and the restart ends as stopped, not as a failure a later cell reports.

The restarted workers are slow to come back: a worker preload that holds their start while a file exists, set
before the cluster starts."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from tests.test_background_start import worker_processes
from tests.test_kernel_faults import Kernel, loaded_kernel
from tests.waiting import wait_for

pytestmark = pytest.mark.slow

HOLD_S = 120.0  # how long a restarted worker's start is held (by its preload), at most


def holding_preload(directory: Path, hold: Path) -> str:
    """A worker preload that holds each worker's start while ``hold`` exists (at most ``HOLD_S``): the first start
    goes at once, the restart's workers wait; the config line that sets it."""
    path = directory / "holding_preload.py"
    path.write_text(
        f"import pathlib, time\nhold, began = pathlib.Path({str(hold)!r}), time.monotonic()\n"
        f"while hold.exists() and time.monotonic() - began < {HOLD_S}:\n"
        "    time.sleep(0.1)\n"
    )
    return f"import dask; dask.config.set({{'distributed.worker.preload': [{str(path)!r}]}})"


@pytest.fixture
def kernel(tmp_path: Path) -> Any:
    with loaded_kernel(tmp_path) as started:
        yield started


def test_stop_during_a_restart_answers_at_once_and_ends_every_worker(kernel: Kernel, tmp_path: Path) -> None:
    hold = tmp_path / "hold-the-restart"
    kernel.ok(holding_preload(tmp_path, hold))
    pid = kernel.manager.provisioner.pid  # type: ignore[union-attr]
    kernel.ok("%gpucluster --cpu-workers 2 --name stopping")
    old = set(kernel.worker_pids())  # waits for the start
    assert len(old) == 2
    processes = len(worker_processes(pid))
    hold.touch()
    try:
        text = kernel.ok("%gpucluster restart")
        assert "restarting 'stopping'" in text
        # the old workers are gone, the new ones are held in their preload
        workers = wait_for(
            lambda: (found := worker_processes(pid)) and not found & old and len(found) >= processes and found,
            120,
            "the restarted workers' processes",
        )
        began = time.monotonic()
        text = kernel.ok("%gpucluster stop", timeout=60)
        took = time.monotonic() - began
    finally:
        hold.unlink()
    assert "stopped cluster 'stopping' while it was restarting" in text, text
    # at once: not after the restart, which the preload holds for up to HOLD_S (a bound far from it)
    assert took < HOLD_S / 2, f"the stop took {took:.1f} s: it waited for the restart"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and any(psutil.pid_exists(p) for p in workers):
        time.sleep(0.2)
    assert not [p for p in workers if psutil.pid_exists(p)], "a worker outlived the stop"
    text = kernel.ok("%gpucluster status")
    assert "no cluster is running" in text and "failed" not in text, text
    assert kernel.ok("print(1)").strip() == "1"  # the next cell says nothing of the stopped restart
