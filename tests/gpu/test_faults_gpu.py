"""Faults on a GPU cluster, through a real kernel as JupyterLab drives it: an interrupt leaves every GPU worker
alive, a task that asks for more device memory than there is fails cleanly and the worker stays, a restart
frees the old processes' GPU memory, and shutdown is graceful."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from tests.test_kernel_faults import SLOW_CELL, SMALL_CELL, TASKS_RUNNING, Kernel
from tests.waiting import wait_for


@pytest.fixture
def kernel(tmp_path: Path) -> Iterator[Kernel]:
    started = Kernel(tmp_path, source="nvml")
    try:
        started.ok("%load_ext gpu_magics")
        started.ok("%gpucluster --name gpu-faults", timeout=180)
        started.ok("import gpu_magics; gpu_magics.client();", timeout=180)  # its start goes on: wait for it
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
    kernel.wait_for_mark(TASKS_RUNNING)  # the tasks are running on the GPU workers
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


HELD_LINE = "already holds a CUDA context"


def nvml_memory_of(pid: int, index: int = 0) -> int | None:
    """What NVML says process ``pid`` holds on GPU ``index`` (``None`` where it does not list that PID, as in
    containers whose PIDs differ from the host's)."""
    import pynvml

    pynvml.nvmlInit()
    try:
        handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        for process in pynvml.nvmlDeviceGetComputeRunningProcesses(handle):
            if int(process.pid) == pid:
                return int(process.usedGpuMemory or 0)
        return None
    finally:
        pynvml.nvmlShutdown()


def test_a_kernel_holding_a_gpu_is_told_in_one_line(tmp_path: Path) -> None:
    kernel = Kernel(tmp_path, source="nvml")
    try:
        kernel.ok("%load_ext gpu_magics")
        kernel.ok("import cupy\nt_held = cupy.ones(2**28, dtype='u1')\ncupy.cuda.Device(0).synchronize()")
        pid = kernel.manager.provisioner.process.pid  # type: ignore[union-attr]
        text = kernel.ok("%gpucluster --gpus 0 --name held", timeout=180)
        lines = [line for line in text.splitlines() if HELD_LINE in line]
        assert len(lines) == 1, text
        assert lines[0].startswith("%gpucluster: this kernel already holds a CUDA context on GPU 0 (")
        if nvml_memory_of(pid) is not None:
            assert " held)" in lines[0]  # and how much, where NVML lists the kernel's PID
        assert kernel.ok(SMALL_CELL, timeout=120).rstrip().endswith("10")  # the cluster works anyway (once up)
        kernel.ok("%gpucluster stop", timeout=60)
    finally:
        kernel.close()


def test_a_kernel_without_a_context_is_told_nothing_and_gets_none(tmp_path: Path) -> None:
    kernel = Kernel(tmp_path, source="nvml")
    try:
        kernel.ok("%load_ext gpu_magics")
        # the driver is loaded, no context
        kernel.ok("import cupy\nfrom gpu_magics.cluster.workers import kernel_context")
        check = "print(kernel_context.primary_contexts([0]))"
        assert kernel.ok(check).strip().splitlines()[-1] == "set()"
        assert HELD_LINE not in kernel.ok("kernel_context.report(['0'])")
        assert kernel.ok(check).strip().splitlines()[-1] == "set()"  # checking created no context
        # nor started the driver (cuInit: 1.2 s on a 4-GPU host, before any worker started): still not initialized
        started = "import ctypes\nprint(ctypes.CDLL('libcuda.so.1').cuDeviceGetCount(ctypes.byref(ctypes.c_int())))"
        assert kernel.ok(started).strip().splitlines()[-1] == "3"
        # another process of the kernel's keeps it started for the workers (no context there: NVML lists nothing)
        keeper = "from gpu_magics.cluster.workers import driver_start\nprint(driver_start._process.pid)"
        keeper_pid = int(kernel.ok(keeper).strip().splitlines()[-1])
        assert psutil.pid_exists(keeper_pid)
        text = kernel.ok("%gpucluster --gpus 0 --name clean", timeout=180)
        assert HELD_LINE not in text  # (the start then makes the kernel's own context, for results)
        kernel.ok("%gpucluster stop", timeout=60)
    finally:
        kernel.close()
    assert wait_for(lambda: not psutil.pid_exists(keeper_pid), timeout=30)  # it ended with the kernel
