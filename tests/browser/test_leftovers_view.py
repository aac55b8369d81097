"""What a kernel that has ended left on the GPUs, and GPU memory a notebook holds on idle GPUs, in the side panel
of real JupyterLab in headless Chromium at the default sidebar width, light and dark. A real kernel starts two
processes that hold simulated GPU memory and is SIGKILLed: the panel says what they hold on which GPU, and "End
them" ends them. Another real kernel's record says it holds memory on an idle GPU, and its cluster's card and the
status bar say so. Screenshots: ``test-artifacts/browser/leftovers-*.png``."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import time
import urllib.request
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import psutil
import pytest
from jupyter_client.blocking.client import BlockingKernelClient

from gpu_magics.cluster.records import record as records
from gpu_magics.monitor import fake_pools
from gpu_magics.server.leftovers import store
from tests.server.test_leftovers import HOLDER, run_cell
from tests.server.test_metrics import BUSY, IDLE, kernel_record
from tests.waiting import wait_for

from .conftest import Lab, run_browser_script
from .test_panel_layout import local_gpu_facts, start_kernel

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.timeout(600)]

GIB = 2**30
CLUSTER = "train"
SPEC = {
    "gpus": [
        {"name": "NVIDIA H100 80GB HBM3", "uuid": IDLE, "memory_total": 80 * GIB, "memory_used": 12 * GIB,
         "gpu_util": 0, "power": 70.5, "processes": []},
        {"name": "NVIDIA H100 80GB HBM3", "uuid": BUSY, "memory_total": 80 * GIB, "memory_used": 40 * GIB,
         "gpu_util": 97, "power": 650, "processes": []},
    ]
}  # fmt: skip  # GPU 0 idle (the idle hold), GPU 1 busy (the leftovers)
# two processes that hold simulated memory on GPU 1, in sessions of their own: the server's restart of the killed
# kernel ends the kernel's process group, as it would a DataLoader's workers
CELL = f"""
import subprocess, sys
holders = [subprocess.Popen([sys.executable, "-c", {HOLDER!r}, {BUSY!r}], stdout=subprocess.PIPE, text=True,
                            start_new_session=True) for _ in range(2)]
print(*[(p.pid, p.stdout.readline().strip()) for p in holders])
"""


@pytest.fixture
def lab(tmp_path: Path, requirements: None, monkeypatch: pytest.MonkeyPatch) -> Iterator[Lab]:
    """JupyterLab on two simulated GPUs whose memory its kernels' processes share; idle holds said after ~1 s."""
    server = Lab(tmp_path)
    spec = tmp_path / "gpus.json"
    spec.write_text(json.dumps(SPEC))
    server.env["GPU_MAGICS_SOURCE"] = f"fake:{spec}"
    server.env[fake_pools.STATE_ENV] = str(tmp_path / "fake-state.json")
    server.extra_args = ["--GpuMagicsServer.idle_hold_warning_min=0.02", "--GpuMagicsServer.metrics_interval=0.25"]
    monkeypatch.setenv("GPU_MAGICS_RUNTIME_DIR", str(server.runtime))  # the records this test writes
    try:
        server.start()
        yield server
    finally:
        server.close()


def kernel_pid(lab: Lab, kernel_id: str) -> int:
    """The process of kernel ``kernel_id`` (its command line names its connection file)."""

    def find() -> int | None:
        for process in psutil.process_iter(["cmdline"]):
            if any(f"kernel-{kernel_id}.json" in part for part in process.info["cmdline"] or ()):
                return process.pid
        return None

    assert wait_for(lambda: find() is not None, 30, "the kernel's process")
    pid = find()
    assert pid is not None
    return pid


def write_cluster_record(runtime: Path, kernel_id: str) -> Path:
    """The discovery record of a cluster kernel ``kernel_id`` started (its card carries the idle-hold line)."""
    record = {
        "name": CLUSTER, "scheduler_address": "tcp://127.0.0.1:8786", "dashboard_url": None, "kind": "gpu",
        "workers": 1, "gpus": ["0"], "pid": os.getpid(), "kernel_id": kernel_id, "started_at": time.time(),
        "version": 5, "members": [], "facts": local_gpu_facts(),
    }  # fmt: skip
    path = runtime / f"gpu-magics-cluster-{os.getpid()}-{CLUSTER}.json"
    path.write_text(json.dumps(record), encoding="utf-8")
    return path


def api(lab: Lab, path: str) -> Any:
    with urllib.request.urlopen(f"{lab.url}gpu-magics/api/{path}?token={lab.token}", timeout=30) as reply:
        return json.loads(reply.read())


def recorded(lab: Lab, pids: list[int]) -> bool:
    """The server has recorded ``pids`` as its kernels' processes (what it saves in its runtime dir)."""
    found: set[int] = set()
    for path in lab.runtime.glob(f"{store.PREFIX}*{store.SUFFIX}"):
        with contextlib.suppress(OSError, ValueError):
            found |= {entry["pid"] for entry in json.loads(path.read_text())["processes"]}
    return set(pids) <= found


def ended(pid: int) -> bool:
    try:
        return bool(psutil.Process(pid).status() == psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return True


def test_leftovers_and_an_idle_hold_in_the_side_panel(lab: Lab) -> None:
    lab.runtime.mkdir(parents=True, exist_ok=True, mode=0o700)
    idle_kernel = start_kernel(lab)
    records.write_record(kernel_record(kernel_pid(lab, idle_kernel), idle_kernel, IDLE, 11 * GIB))
    write_cluster_record(lab.runtime, idle_kernel)
    dying = start_kernel(lab)
    client = BlockingKernelClient(connection_file=str(Path(lab.env["JUPYTER_RUNTIME_DIR"]) / f"kernel-{dying}.json"))
    client.load_connection_file()
    client.start_channels(hb=False)
    holders: list[int] = []
    try:
        client.wait_for_ready(timeout=90)
        output = run_cell(client, CELL)
        holders = [int(pid) for pid in re.findall(r"\((\d+), 'holding'\)", output)]
        assert len(holders) == 2, output
        assert wait_for(lambda: recorded(lab, holders), 30, "the server records the kernel's processes")
        os.kill(kernel_pid(lab, dying), signal.SIGKILL)  # its processes keep their GPU memory
        wait_for(lambda: len(api(lab, "leftovers")["leftovers"]) == 2, 30, "the server lists the leftovers")
        result = run_browser_script(lab, "leftovers_view.mjs", " ".join(map(str, holders)))
        assert "the leftovers and the idle hold read right" in result.stdout
        for pid in holders:  # "End them" ended them
            assert wait_for(partial(ended, pid), 15, f"pid {pid} ends")
    finally:
        client.stop_channels()
        for pid in holders:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
