"""An interrupt stops the work it interrupts on GPU workers, through a real kernel: the runs of a ``multi-gpu``
cell (one per GPU) stop between their chunks, the tasks not started are dropped, the next cell runs at once and
the scheduler holds nothing of the interrupted cell (tests/test_interrupt_stops_work.py does the same on CPU)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.gpu.conftest import GPU_COUNT
from tests.test_interrupt_stops_work import NEXT, WORK_TEMPLATE, assert_work_stopped, interrupted
from tests.test_kernel_faults import Kernel


@pytest.fixture
def kernel(tmp_path: Path) -> Iterator[Kernel]:
    started = Kernel(tmp_path, source="nvml")
    try:
        started.ok("%load_ext gpu_magics")
        started.ok("%gpucluster --name gpu-interrupts", timeout=180)
        started.ok("import gpu_magics; gpu_magics.client();", timeout=180)  # its start goes on: wait for it
        yield started
    finally:
        started.close()


def test_an_interrupted_cell_stops_its_runs_on_every_gpu_worker(kernel: Kernel) -> None:
    work = WORK_TEMPLATE.format(chunks=200 * max(GPU_COUNT, 1))  # about 100 s of chunks whatever the GPU count
    before = kernel.worker_pids()
    text = interrupted(kernel, "%%gpurun multi-gpu --no-monitor\n" + work)
    assert "interrupted" in text
    assert_work_stopped(kernel, "%%gpurun multi-gpu -q\n" + NEXT)
    assert kernel.worker_pids() == before  # stopped between chunks, not by ending the workers


def test_an_interrupted_session_cell_stops_its_work_on_the_gpu_workers(kernel: Kernel) -> None:
    kernel.ok("%gpurun multi-gpu")
    interrupted(kernel, WORK_TEMPLATE.format(chunks=200 * max(GPU_COUNT, 1)))
    assert_work_stopped(kernel, NEXT)
