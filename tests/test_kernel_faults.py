"""What users do to a kernel, done through a real kernel as JupyterLab drives it (jupyter_client): interrupts
(SIGINT to the kernel's whole process group), failing cells, a task that kills its worker, shutdown.

Each kernel gets a CPU cluster (``%gpucluster --cpu-workers 2``) with real worker processes. Every wait is
bounded.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
from jupyter_client.blocking.client import BlockingKernelClient
from jupyter_client.manager import KernelManager

from tests.display_recording import CellOutput
from tests.waiting import wait_for

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]


class Kernel:
    """A real IPython kernel with gpu-magics loaded, and a way to run cells in it."""

    def __init__(self, runtime_dir: Path, source: str = "fake:0") -> None:
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
            "GPU_MAGICS_RUNTIME_DIR": str(runtime_dir),
            "GPU_MAGICS_SOURCE": source,
        }
        self.manager = KernelManager(kernel_name="python3")
        self.runtime_dir = runtime_dir
        self.manager.start_kernel(env=env, cwd=str(runtime_dir))
        self.client: BlockingKernelClient = self.manager.client()
        self.client.start_channels()
        self.client.wait_for_ready(timeout=120)  # a kernel's first start on a busy CI machine (pytest-xdist, a browser)

    def start(self, code: str) -> str:
        """Send a cell; returns its message id at once."""
        return str(self.client.execute(code))

    def finish(self, msg_id: str, timeout: float) -> tuple[dict[str, Any], str]:
        """Wait for the cell's reply; returns the reply's content and everything the cell printed or showed (an
        output updated in place, as a live table, as it was left: its last frame, where its first one was)."""
        output = CellOutput()
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            assert remaining > 0, f"no idle status within {timeout} s; output so far: {output.text}"
            message = self.client.get_iopub_msg(timeout=remaining)
            if message["parent_header"].get("msg_id") != msg_id:
                continue
            if message["msg_type"] == "status" and message["content"]["execution_state"] == "idle":
                break
            output.take(message)
        while True:  # replies to earlier requests (kernel_info at start-up) may come first
            reply = self.client.get_shell_msg(timeout=max(1.0, deadline - time.monotonic()))
            if reply["parent_header"].get("msg_id") == msg_id:
                return reply["content"], output.text

    def read_until(self, msg_id: str, line: str, timeout: float) -> str:
        """What the running cell ``msg_id`` printed or showed (updates taken in place) once it says ``line``; the
        rest is for ``finish``."""
        output = CellOutput()
        deadline = time.monotonic() + timeout
        while line not in output.text:
            remaining = deadline - time.monotonic()
            assert remaining > 0, f"no {line!r} within {timeout} s; output so far: {output.text}"
            try:
                message = self.client.get_iopub_msg(timeout=remaining)
            except queue.Empty:
                raise AssertionError(f"no {line!r} within {timeout} s; output so far: {output.text}") from None
            if message["parent_header"].get("msg_id") == msg_id:
                output.take(message)
        return output.text

    def run(self, code: str, timeout: float = 60) -> tuple[dict[str, Any], str]:
        return self.finish(self.start(code), timeout)

    def ok(self, code: str, timeout: float = 60) -> str:
        reply, text = self.run(code, timeout)
        assert reply["status"] == "ok", text
        return text

    def wait_for_mark(self, name: str, timeout: float = 120) -> None:
        """Wait until the cell running leaves the mark ``name`` (a file in the kernel's runtime directory: see
        ``SLOW_CELL``, ``STARTED``), so that what the test does next finds it where it means to."""
        wait_for(lambda: (self.runtime_dir / name).exists(), timeout, f"the cell's mark {name!r}")

    def worker_pids(self) -> list[int]:
        text = self.ok(
            "import gpu_magics, os, json; print(json.dumps(sorted(gpu_magics.client().run(os.getpid).values())))"
        )
        return list(json.loads(text.strip().splitlines()[-1]))

    def close(self) -> None:
        self.client.stop_channels()
        if self.manager.is_alive():
            self.manager.shutdown_kernel(now=True)


@contextlib.contextmanager
def loaded_kernel(runtime_dir: Path, source: str = "fake:0") -> Iterator[Kernel]:
    """A real kernel with ``%load_ext gpu_magics`` done; shut down after the block."""
    started = Kernel(runtime_dir, source)
    try:
        started.ok("%load_ext gpu_magics")
        yield started
    finally:
        started.close()


@pytest.fixture
def kernel(tmp_path: Path) -> Iterator[Kernel]:
    with loaded_kernel(tmp_path) as started:
        started.ok("%gpucluster --cpu-workers 2 --name faults", timeout=120)
        started.ok("import gpu_magics; gpu_magics.client();", timeout=120)  # its start went on: wait for it
        yield started


# Two chunks of 10 s, one task each (too few to run grouped): an interrupt leaves them running on the workers. Each
# task leaves the mark TASKS_RUNNING as it starts (Kernel.wait_for_mark): an interrupt then finds them running.
TASKS_RUNNING = "tasks-running"
SLOW_CELL = f"""%%gpurun multi-gpu --no-monitor
import os, pathlib, time
import dask.array as da
import numpy as np
mark = pathlib.Path(os.environ["GPU_MAGICS_RUNTIME_DIR"], {TASKS_RUNNING!r})
x = da.ones((2,), chunks=1).map_blocks(lambda block: (mark.touch(), time.sleep(10), block)[2], meta=np.empty(0))
x.sum().compute()
"""
STARTED = "started"  # the mark a plain cell leaves as it starts (in the kernel's working directory)


SMALL_CELL = "%%gpurun multi-gpu -q\nimport dask.array as da\nprint(int(da.ones(10, chunks=5).sum().compute()))"


def test_interrupting_a_cluster_cell_keeps_the_workers(kernel: Kernel) -> None:
    before = kernel.worker_pids()
    msg_id = kernel.start(SLOW_CELL)
    kernel.wait_for_mark(TASKS_RUNNING)  # the tasks are running on the workers
    kernel.manager.interrupt_kernel()  # SIGINT to the kernel's process group, as JupyterLab does
    reply, text = kernel.finish(msg_id, timeout=30)
    assert reply["status"] == "error" and reply["ename"] == "KeyboardInterrupt"
    assert "KeyboardInterrupt" in text
    assert "still running on the cluster" in text and "%gpucluster restart" in text
    assert_short_interrupt(text)
    assert kernel.worker_pids() == before  # nobody died
    text = kernel.ok(
        "%%gpurun multi-gpu -q\nimport dask.array as da\nprint(int(da.ones(10, chunks=5).sum().compute()))"
    )
    assert text.strip().splitlines()[-1] == "10"


def assert_short_interrupt(text: str) -> None:
    """The interrupt, the user's own lines and our line: no frames of dask, distributed or threading, and no
    "Task exception was never retrieved" report from the client's loop."""
    assert "x.sum().compute()" in text  # the user's line
    for noise in ("threading.py", "dask/base.py", "distributed/client.py", "Task exception was never retrieved"):
        assert noise not in text, text
    assert len(text.splitlines()) <= 16, text


def test_interrupting_a_session_cell_on_the_cluster_is_short(kernel: Kernel) -> None:
    kernel.ok("%gpurun multi-gpu")
    msg_id = kernel.start(SLOW_CELL.split("\n", 1)[1])  # the same work as a plain cell
    kernel.wait_for_mark(TASKS_RUNNING)
    kernel.manager.interrupt_kernel()
    reply, text = kernel.finish(msg_id, timeout=30)
    assert reply["status"] == "error" and reply["ename"] == "KeyboardInterrupt"
    assert "still running on the cluster" in text
    assert_short_interrupt(text)
    time.sleep(1.0)  # the abandoned futures are collected: their report would come now
    assert "Task exception was never retrieved" not in kernel.ok("import gc; gc.collect(); print('next')")


def test_interrupting_a_plain_cell_keeps_the_workers(kernel: Kernel) -> None:
    before = kernel.worker_pids()
    msg_id = kernel.start(f"import pathlib, time\npathlib.Path({STARTED!r}).touch()\ntime.sleep(300)")
    kernel.wait_for_mark(STARTED)
    kernel.manager.interrupt_kernel()
    reply, _ = kernel.finish(msg_id, timeout=120)  # interrupted: not the cell's 300 s
    assert reply["status"] == "error" and reply["ename"] == "KeyboardInterrupt"
    assert kernel.worker_pids() == before


def test_restart_on_interrupt_stops_what_still_runs(kernel: Kernel) -> None:
    before = kernel.worker_pids()
    kernel.ok("%config GpuMagics.restart_on_interrupt = True")
    msg_id = kernel.start(SLOW_CELL.replace("time.sleep(10)", "time.sleep(60)"))
    kernel.wait_for_mark(TASKS_RUNNING)
    kernel.manager.interrupt_kernel()
    reply, text = kernel.finish(msg_id, timeout=60)
    assert reply["status"] == "error" and reply["ename"] == "KeyboardInterrupt"
    assert "restarted the workers" in text
    after = kernel.worker_pids()
    assert len(after) == 2 and not set(after) & set(before)
    text = kernel.ok(
        "%%gpurun multi-gpu -q\nimport dask.array as da\nprint(int(da.ones(10, chunks=5).sum().compute()))"
    )
    assert text.strip().splitlines()[-1] == "10"


def test_interrupting_a_plain_cell_on_the_session_backend_keeps_the_workers(kernel: Kernel) -> None:
    """``%gpurun multi-gpu``: plain cells run on the cluster, and an interrupt behaves as in a ``%%gpurun`` cell."""
    before = kernel.worker_pids()
    assert "plain cells now use multi-gpu" in kernel.ok("%gpurun multi-gpu")
    msg_id = kernel.start(SLOW_CELL.split("\n", 1)[1])  # the same cell, plain
    kernel.wait_for_mark(TASKS_RUNNING)
    kernel.manager.interrupt_kernel()
    reply, text = kernel.finish(msg_id, timeout=30)
    assert reply["status"] == "error" and reply["ename"] == "KeyboardInterrupt"
    assert "still running on the cluster" in text and "%gpucluster restart" in text
    assert kernel.worker_pids() == before
    reply, text = kernel.run("raise ValueError('bad input')")
    assert reply["status"] == "error" and reply["evalue"] == "bad input" and "gpu_magics" not in text
    text = kernel.ok("import dask.array as da, os\nprint(int(da.ones(10, chunks=5).sum().compute()))")
    assert text.strip().splitlines()[-1] == "10"
    assert "plain cells: multi-gpu" in kernel.ok("%gpurun")


def test_a_failing_cell_fails_like_a_plain_cell(kernel: Kernel) -> None:
    reply, text = kernel.run("%%gpurun cpu-single\nraise ValueError('bad input')")
    assert reply["status"] == "error" and reply["ename"] == "ValueError" and reply["evalue"] == "bad input"
    assert text.count("Traceback (most recent call last)") == 1 and "gpu_magics" not in text


def test_a_failing_reduction_on_the_cluster_fails_like_a_plain_cell(kernel: Kernel) -> None:
    """A reduction whose aggregate the kernel computes (``kernel_tail``): a chunk's error is the cell's error."""
    cell = (
        "%%gpurun multi-gpu -q --no-monitor\nimport dask.array as da, numpy as np\n"
        "def bad(block):\n    raise ZeroDivisionError('a chunk failed')\n"
        "da.ones((40, 40), chunks=10).map_blocks(bad, dtype=float, meta=np.empty((0, 0))).sum().compute()"
    )
    reply, text = kernel.run(cell, timeout=120)
    assert reply["status"] == "error" and reply["ename"] == "ZeroDivisionError", text
    assert reply["evalue"] == "a chunk failed"
    assert "1600" in kernel.ok(SMALL_CELL.replace("da.ones(10, chunks=5)", "da.ones((40, 40), chunks=10)"))


def test_a_task_that_kills_its_worker_raises_and_the_worker_comes_back(kernel: Kernel) -> None:
    cell = (
        "%%gpurun multi-gpu --no-monitor\n"
        "import os\nfrom distributed import get_client\n"
        "get_client().submit(os._exit, 1, pure=False).result()"
    )
    reply, _ = kernel.run(cell, timeout=120)
    assert reply["status"] == "error" and reply["ename"] == "KilledWorker"
    deadline = time.monotonic() + 60
    while len(pids := kernel.worker_pids()) < 2:
        assert time.monotonic() < deadline, "the nannies did not bring the workers back"
        time.sleep(0.5)
    forked = kernel.ok(
        "import sys\nprint(set(gpu_magics.client().run("
        "lambda: 'gpu_magics.cluster.workers.forkserver_preload' in sys.modules).values()))"
    )
    assert forked.strip().splitlines()[-1] == "{True}"  # replacements fork from the prepared server too
    assert len(pids) == 2


def test_shutdown_is_graceful(kernel: Kernel, tmp_path: Path) -> None:
    marker = tmp_path / "atexit-ran"
    kernel.ok(f"import atexit, pathlib\natexit.register(pathlib.Path({str(marker)!r}).write_text, 'yes')")
    assert list(tmp_path.glob("gpu-magics-cluster-*.json"))
    process = kernel.manager.provisioner.process  # type: ignore[union-attr]
    children = psutil.Process(process.pid).children(recursive=True)
    assert children
    kernel.client.stop_channels()
    kernel.manager.shutdown_wait_time = 30.0  # a loaded machine may need more than jupyter_client's 5 s: exit by itself
    kernel.manager.shutdown_kernel(now=False)
    assert process.wait(timeout=30) == 0  # exited by itself, not killed
    assert marker.read_text() == "yes"
    assert list(tmp_path.glob("gpu-magics-cluster-*.json")) == []
    _, alive = psutil.wait_procs(children, timeout=60)
    assert alive == []


def test_a_cluster_without_workers_says_so(kernel: Kernel) -> None:
    kernel.ok(
        "import gpu_magics, time\nc = gpu_magics.client()\nc.retire_workers(list(c.scheduler_info()['workers']))\n"
        "deadline = time.monotonic() + 30\nwhile c.scheduler_info()['workers'] and time.monotonic() < deadline:\n"
        "    time.sleep(0.1)",
        timeout=60,
    )
    reply, text = kernel.run("%%gpurun multi-gpu\n1 + 1", timeout=30)
    assert reply["status"] == "error" and reply["ename"] == "UsageError"
    assert "no workers" in text and "%gpucluster scale" in text
    status = kernel.ok("%gpucluster status")
    assert "0 workers" in status and "%gpucluster scale" in status
