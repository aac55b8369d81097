"""Where parking's lines appear in a real kernel (``GPU_MAGICS_SOURCE=fake:2``, the CUDA driver's stand-in): a kernel
sends what a thread other than the cell's own prints or shows to the cell whose context it runs in, so a line said from
the scheduler's plugin or the idle watch's thread could reach no cell. The resume that work brings is said in the
output of the cell whose work brought it (a ``.compute()`` in a plain cell, a ``%%gpurun`` cell, an SPMD cell, a
plain cell in a session); a park on idle (``ClusterMagics.park_after``) is said once, in the next cell's output.
Each cell's outputs are those the kernel sent with that cell's message id, as the notebook takes them."""

from __future__ import annotations

import contextlib
import json
import re
import time
from pathlib import Path

import pytest

from tests.test_kernel_faults import loaded_kernel
from tests.test_parking_settings import SIMULATED, html_line, outputs
from tests.waiting import wait_for

pytestmark = pytest.mark.slow

RESUMED = f"%gpucluster: resumed 2 workers of 'sim' {SIMULATED} in "
RESUMED_WITH_RANKS = f"%gpucluster: resumed 2 workers and 2 ranks of 'sim' {SIMULATED} in "  # the SPMD ranks too


def parked(runtime_dir: Path) -> bool:
    """Whether the cluster's record says it is parked (read from here: a cell would run while it parks)."""
    for path in runtime_dir.glob("gpu-magics-cluster-*-sim.json"):
        with contextlib.suppress(OSError, ValueError):  # being written
            return json.loads(path.read_text()).get("parked") is not None
    return False


def test_the_resume_that_work_brings_is_said_in_the_cell_whose_work_brought_it(tmp_path: Path) -> None:
    with loaded_kernel(tmp_path, "fake:2") as kernel:
        kernel.ok("%config ClusterMagics.wait_for_workers = True")  # both workers there: both parked
        kernel.ok("%gpucluster --name sim", timeout=180)
        kernel.ok("import dask.array as da\nx = da.arange(1000, chunks=100).persist()\ntotal = int(x.sum().compute())")
        kernel.ok("%gpucluster park")
        shown = outputs(kernel, "print(int(x.sum().compute()) == total)")  # a plain cell: the scheduler resumes
        html_line(shown, RESUMED)
        assert ("stream", "True\n") in shown
        kernel.ok("%gpucluster park")
        shown = outputs(kernel, "%%gpurun multi-gpu\nprint(int(x.sum().compute()) == total)")
        html_line(shown, RESUMED)
        kernel.ok("%gpucluster park")
        shown = outputs(kernel, "%%gpurun spmd -q\nimport os\nprint('rank', os.environ['RANK'])", timeout=180)
        html_line(shown, RESUMED)  # the ranks reach the workers without the scheduler: the cell resumes them first
        assert any(kind == "stream" and "rank 0" in str(data) for kind, data in shown), shown
        kernel.ok("%gpurun multi-gpu", timeout=180)
        try:
            kernel.ok("%gpucluster park")
            shown = outputs(kernel, "print(int(x.sum().compute()) == total)")  # a plain cell in the session
            html_line(shown, RESUMED_WITH_RANKS)
        finally:
            kernel.ok("%gpurun off")


def test_a_park_on_idle_is_said_once_in_the_next_cells_output(tmp_path: Path) -> None:
    with loaded_kernel(tmp_path, "fake:2") as kernel:
        kernel.ok("%config ClusterMagics.wait_for_workers = True")  # the setting then finds the workers there
        kernel.ok("%gpucluster --name sim", timeout=180)
        kernel.ok("%config ClusterMagics.park_after = '2s'")
        wait_for(lambda: parked(tmp_path), 120, "the idle park", step=0.5)
        begins = "%gpucluster: parked 2 workers of 'sim' "
        deadline = time.monotonic() + 60  # the record says parked a moment before the line is kept: cells until it
        shown = outputs(kernel, "1 + 1")  # shows
        while not any(begins in str(data) for _, data in shown) and time.monotonic() < deadline:
            shown = outputs(kernel, "1 + 1")
        line = html_line(shown, begins)
        assert re.search(r" at \d\d:\d\d:\d\d, after 2 s without a task \(ClusterMagics\.park_after\): ", line), line
        assert " of GPU memory back to the server in " in line
        again = outputs(kernel, "2 + 2")
        assert not any("parked 2 workers" in str(data) for _, data in again), again


def test_the_idle_timeouts_close_is_said_once_in_the_next_cells_output(tmp_path: Path) -> None:
    """The idle timeout closes the cluster from its watch's thread, between cells: the next cell says so."""
    with loaded_kernel(tmp_path) as kernel:
        kernel.ok("%gpucluster --cpu-workers 1 --name idle --idle-timeout 2s", timeout=180)
        wait_for(lambda: not list(tmp_path.glob("gpu-magics-cluster-*-idle.json")), 120, "the idle close", step=0.5)
        closed = "%gpucluster: closed cluster 'idle' after 2 s without a task (--idle-timeout)"
        deadline = time.monotonic() + 60  # its record goes a moment before the line is kept: cells until it shows
        shown = outputs(kernel, "1 + 1")
        while not any(closed in str(data) for _, data in shown) and time.monotonic() < deadline:
            shown = outputs(kernel, "1 + 1")
        line = html_line(shown, closed)
        assert line.endswith("its workers have ended. %gpucluster starts a new one"), line  # CPU workers
        again = outputs(kernel, "2 + 2")
        assert not any("closed cluster" in str(data) for _, data in again), again


def test_a_kernel_restarted_while_parked_leaves_no_process_and_no_record(tmp_path: Path) -> None:
    """The kernel's shutdown stops its cluster as usual: parked, it resumes it first, then closes it."""
    from tests.test_background_start import descendants, gone

    with loaded_kernel(tmp_path, "fake:2") as kernel:
        kernel.ok("%config ClusterMagics.wait_for_workers = True")
        kernel.ok("%gpucluster --name sim", timeout=180)
        kernel.ok("import dask.array as da\nx = da.arange(1000, chunks=100).persist()\nint(x.sum().compute())")
        kernel.ok("%gpucluster park")
        assert parked(tmp_path)
        held = descendants(kernel.manager.provisioner.pid)  # type: ignore[union-attr]
        assert len(held) >= 2  # its workers (and the processes they fork from)
        kernel.manager.restart_kernel(now=False)
        assert gone(held, 120.0) == set()
        assert not list(tmp_path.glob("gpu-magics-cluster-*.json"))
