"""Faults on a GPU cluster, through a real kernel as JupyterLab drives it: an interrupt leaves every GPU worker
alive, a task that asks for more device memory than there is fails cleanly and the worker stays, a restart
frees the old processes' GPU memory, and shutdown is graceful."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.test_kernel_faults import SLOW_CELL, SMALL_CELL, Kernel


@pytest.fixture
def kernel(tmp_path: Path) -> Iterator[Kernel]:
    started = Kernel(tmp_path, source="nvml")
    try:
        started.ok("%load_ext gpu_magics")
        started.ok("%gpucluster --name gpu-faults", timeout=180)
        yield started
    finally:
        started.close()


def used_bytes() -> list[int]:
    """Memory used on each GPU, as NVML reports it."""
    import pynvml

    pynvml.nvmlInit()
    try:
        return [
            int(pynvml.nvmlDeviceGetMemoryInfo(pynvml.nvmlDeviceGetHandleByIndex(i)).used)
            for i in range(pynvml.nvmlDeviceGetCount())
        ]
    finally:
        pynvml.nvmlShutdown()


def test_interrupt_keeps_every_gpu_worker(kernel: Kernel) -> None:
    before = kernel.worker_pids()
    msg_id = kernel.start(SLOW_CELL)
    time.sleep(3.0)
    kernel.manager.interrupt_kernel()
    reply, text = kernel.finish(msg_id, timeout=60)
    assert reply["status"] == "error" and reply["ename"] == "KeyboardInterrupt"
    assert "interrupted" in text
    assert kernel.worker_pids() == before
    assert kernel.ok(SMALL_CELL, timeout=120).strip().splitlines()[-1] == "10"


def test_a_task_beyond_device_memory_fails_cleanly(kernel: Kernel) -> None:
    before = kernel.worker_pids()
    cell = (
        "%%gpurun multi-gpu --no-monitor\n"
        "import cupy\nfrom distributed import get_client\n"
        "get_client().submit(lambda: int(cupy.empty(2**50, dtype='u1').size), pure=False).result()"
    )
    reply, text = kernel.run(cell, timeout=120)
    assert reply["status"] == "error" and "Memory" in reply["ename"], text[-2000:]
    assert kernel.worker_pids() == before
    assert kernel.ok(SMALL_CELL, timeout=120).strip().splitlines()[-1] == "10"


def test_restart_frees_the_old_workers_gpu_memory(kernel: Kernel) -> None:
    baseline = sum(used_bytes())
    kernel.ok(
        "import gpu_magics, cupy\n"
        "def hold(dask_worker):\n"
        "    dask_worker.held_for_test = cupy.ones(2**31, dtype='u1')\n"
        "    return dask_worker.held_for_test.nbytes\n"
        "print(sum(gpu_magics.client().run(hold).values()))",
        timeout=120,
    )
    assert sum(used_bytes()) > baseline + 2**31 * 0.9
    before = kernel.worker_pids()
    kernel.ok("%gpucluster restart", timeout=180)
    assert not set(kernel.worker_pids()) & set(before)
    deadline = time.monotonic() + 20
    while sum(used_bytes()) > baseline + 2**30 and time.monotonic() < deadline:
        time.sleep(0.5)
    assert sum(used_bytes()) < baseline + 2**30


def test_shutdown_with_gpu_workers_is_graceful(kernel: Kernel, tmp_path: Path) -> None:
    process = kernel.manager.provisioner.process  # type: ignore[union-attr]
    kernel.client.stop_channels()
    kernel.manager.shutdown_kernel(now=False)
    assert process.wait(timeout=20) == 0
    assert list(tmp_path.glob("gpu-magics-cluster-*.json")) == []
