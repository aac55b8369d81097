"""An interrupt stops the work it interrupts, through a real kernel (jupyter_client) and real worker processes.

The interrupted cell reduces 400 chunks that sleep 0.5 s each: about 100 s on two worker threads, in one run of
chunks per thread (``%%gpurun multi-gpu`` groups a reduction's chunks so). After the interrupt, the tasks that
had not started are dropped and the runs stop between their chunks, so the next cell runs at once and the
scheduler soon holds nothing of the interrupted cell. Every wait is bounded well below what the interrupted work
would take, and nothing asserts on how long a step took.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cli_cluster import cli_cluster
from tests.test_kernel_faults import TASKS_RUNNING, Kernel, loaded_kernel

pytestmark = pytest.mark.slow

WORK_TEMPLATE = """import os, pathlib, time
import dask.array as da
import numpy as np

mark = pathlib.Path(os.environ["GPU_MAGICS_RUNTIME_DIR"], "tasks-running")  # Kernel.wait_for_mark

def slow_chunk(block):
    mark.touch()
    time.sleep(0.5)
    return block

x = da.ones({chunks}, chunks=1).map_blocks(slow_chunk, meta=np.empty(0), name="interrupted-work")
x.sum().compute()
"""
WORK = WORK_TEMPLATE.format(chunks=400)
NEXT = "import dask.array as da\nprint(int((da.arange(1000, chunks=100) * 2).sum().compute()))"
NEXT_TIMEOUT = 60.0  # the interrupted work would keep the workers busy for about 95 s more
LEFT = """import gpu_magics, time

def _held(tasks):
    return sum('interrupted-work' in str(key) for key in tasks)

def _on_scheduler(dask_scheduler):
    return _held(dask_scheduler.tasks)

def _on_worker(dask_worker):
    return _held(dask_worker.state.tasks)

_deadline = time.monotonic() + 30
while True:
    _c = gpu_magics.client()
    _counts = [_c.run_on_scheduler(_on_scheduler), *_c.run(_on_worker).values()]
    if not any(_counts) or time.monotonic() > _deadline:
        break
    time.sleep(0.2)
print('left', _counts, 'places', len(_counts))
"""


def interrupted(kernel: Kernel, cell: str) -> str:
    """Run ``cell``, interrupt it once its chunks run, and return what it showed (it ended in KeyboardInterrupt)."""
    (kernel.runtime_dir / TASKS_RUNNING).unlink(missing_ok=True)  # an earlier cell's, on this module's kernel
    msg_id = kernel.start(cell)
    kernel.wait_for_mark(TASKS_RUNNING)  # the runs compute their first chunks
    kernel.manager.interrupt_kernel()  # SIGINT to the kernel's process group, as JupyterLab does
    reply, text = kernel.finish(msg_id, timeout=60)
    assert reply["status"] == "error" and reply["ename"] == "KeyboardInterrupt", text
    return text


def assert_work_stopped(kernel: Kernel, next_cell: str) -> None:
    """The next cell runs as if nothing had been interrupted, and neither the scheduler nor a worker holds a task
    of the interrupted cell any more."""
    text = kernel.ok(next_cell, timeout=NEXT_TIMEOUT)
    assert text.strip().splitlines()[-1] == "999000"
    last = kernel.ok(LEFT, timeout=60).strip().splitlines()[-1]
    places = int(last.rsplit(" ", 1)[-1])  # the scheduler and every worker, whatever their number
    assert places >= 2 and last == f"left {[0] * places} places {places}"


@pytest.fixture(scope="module")
def kernel(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Kernel]:
    with loaded_kernel(tmp_path_factory.mktemp("interrupts")) as started:
        started.ok("%gpucluster --cpu-workers 2 --name interrupts", timeout=120)
        started.ok("import gpu_magics; gpu_magics.client();", timeout=120)  # its start went on: wait for it
        yield started


def test_an_interrupted_gpurun_cell_stops_its_runs_on_the_workers(kernel: Kernel) -> None:
    text = interrupted(kernel, "%%gpurun multi-gpu --no-monitor\n" + WORK)
    assert "interrupted" in text
    assert_work_stopped(kernel, "%%gpurun multi-gpu -q\n" + NEXT)


def test_an_interrupted_plain_cell_of_a_session_stops_its_work(kernel: Kernel) -> None:
    kernel.ok("%gpurun multi-gpu")
    try:
        interrupted(kernel, WORK)
        assert_work_stopped(kernel, NEXT)
    finally:
        kernel.ok("%gpurun off")


def test_an_interrupted_compute_on_the_clusters_client_stops_its_work(kernel: Kernel) -> None:
    """A plain cell, no session: ``.compute()`` goes to the cluster's client (dask's default), one task a chunk."""
    interrupted(kernel, WORK)
    assert_work_stopped(kernel, NEXT)


def test_an_interrupted_cell_on_an_attached_cluster_stops_its_runs(tmp_path: Path) -> None:
    """A scheduler and workers started by Dask's CLI in processes of their own, attached with ``--address``."""
    workers = {name: ("127.0.0.1", {"GPU_MAGICS_SOURCE": "fake:0"}) for name in ("a", "b")}
    with cli_cluster(workers, tmp_path / "logs") as cluster, loaded_kernel(tmp_path) as attached:
        attached.ok(f"%gpucluster --address {cluster.address} --name attached", timeout=120)
        attached.ok("import gpu_magics; gpu_magics.client();", timeout=120)
        text = interrupted(attached, "%%gpurun multi-gpu --no-monitor\n" + WORK)
        assert "this kernel attached to it" in text or "nothing is left running" in text, text
        assert_work_stopped(attached, "%%gpurun multi-gpu -q\n" + NEXT)
