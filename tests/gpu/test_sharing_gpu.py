"""Shared GPU servers on real GPUs (issue 20): after a ``%%gpurun gpu`` cell, "free cached" brings the GPU's memory in
use (NVML) back within 1 GiB of its level before the cell; the kernel's report says arrays, cached and context
from CuPy's pool and NVML, without creating a CUDA context to say it; an idle timeout of a few seconds closes a
one-GPU cluster and frees its GPU; with 2 GPUs, ``--gpus free`` leaves the GPU another process keeps busy."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output

from gpu_magics import gpus
from gpu_magics.cluster.control import queries
from gpu_magics.cluster.control.verbs import stop
from gpu_magics.cluster.records import kernel_report
from gpu_magics.cluster.records import record as cluster_records
from gpu_magics.magics.gpucluster import ClusterMagics
from tests.gpu.conftest import GPU_COUNT
from tests.waiting import wait_for

GIB = 2**30
# 8 GB of float64 in 200 MB chunks, drawn on the device, reduced: the pool keeps what the chunks took
CELL = "x = da.random.random((32_000, 32_000), chunks=(5_000, 5_000))\nt_total = float((x + 1).sum().compute())\n"


def used_on(index: int) -> int:
    """The memory in use on GPU ``index`` as NVML says (every process's), read without a CUDA context."""
    import pynvml

    pynvml.nvmlInit()
    try:
        device = gpus.inventory().devices()[index]
        handle = pynvml.nvmlDeviceGetHandleByUUID(device.uuid)
        return int(pynvml.nvmlDeviceGetMemoryInfo(handle).used)
    finally:
        pynvml.nvmlShutdown()


@pytest.fixture
def runtime(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv(cluster_records.RUNTIME_DIR_ENV, str(tmp_path))
    return tmp_path


def test_reporting_creates_no_cuda_context(tmp_path: Path) -> None:
    """A kernel that loads the extension and runs cells without the GPU holds nothing on it (no CUDA context)."""
    script = textwrap.dedent("""
        import sys
        from IPython.testing.globalipapp import start_ipython
        ip = start_ipython()
        ip.run_line_magic("load_ext", "gpu_magics")
        ip.run_cell("t = 1 + 1")
        ip.run_line_magic("gpucluster", "free")
        from gpu_magics.cluster.telemetry.process_memory import primary_contexts
        print(primary_contexts([0]))
    """)
    env = {**os.environ, cluster_records.RUNTIME_DIR_ENV: str(tmp_path), "GPU_MAGICS_SOURCE": "nvml"}
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    # CuPy may be imported (%load_ext imports it ahead, in a thread: an import makes no CUDA context)
    assert done.stdout.strip().splitlines()[-1] == "set()"
    assert list(tmp_path.glob("gpu-magics-kernel-*.json")) == []


def test_the_kernels_context_starts_without_holding_the_gil() -> None:
    """The kernel's own CUDA context, made while its workers start, lets other threads run meanwhile (its event
    loop runs the scheduler and the nannies), and is the context CuPy then uses; a second call does nothing."""
    script = textwrap.dedent("""
        import threading, time
        from gpu_magics.cluster.telemetry.process_memory import primary_contexts
        from gpu_magics.cluster.workers.warmup import start_cuda_without_the_gil
        ticks, done = [], threading.Event()
        def tick():
            while not done.is_set():
                ticks.append(time.perf_counter())
                time.sleep(0.001)
        ticker = threading.Thread(target=tick)
        ticker.start()
        time.sleep(0.05)
        began = time.perf_counter()
        start_cuda_without_the_gil()
        ended = time.perf_counter()
        done.set()
        ticker.join()
        during = sum(began < t < ended for t in ticks)
        print(primary_contexts([0]))
        start_cuda_without_the_gil()
        import cupy
        cupy.zeros(1).sum()
        print(cupy.cuda.runtime.getDevice(), primary_contexts([0]))
        print(round(ended - began, 3), during)
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    made, used, timing = done.stdout.strip().splitlines()[-3:]
    took, during = timing.split()
    assert made == "{0}" and used == "0 {0}"
    if float(took) > 0.05:  # the driver's start takes 0.3-1.2 s on these hosts: the other thread ran meanwhile
        assert int(during) >= 10, (took, during)


def test_free_cached_after_a_gpu_cell_brings_memory_back(ip: InteractiveShell, runtime: Path) -> None:
    ip.run_cell("import dask.array as da")
    before = used_on(0)
    with capture_output():
        ip.run_cell(f"%%gpurun gpu --device 0 -q\n{CELL}")  # as a notebook runs it: the kernel reports after it
    assert ip.user_ns["t_total"] > 0
    assert kernel_report.settle()  # the record after the cell is written by its own thread
    [held] = [gpu for gpu in kernel_report.kernel_memory(fresh=True) if gpu.index == 0]
    print(f"\nbefore {before / GIB:.2f} GiB, after the cell {used_on(0) / GIB:.2f} GiB, kernel: {held.held}")
    assert held.held.source == "cupy" and (held.held.cached or 0) > GIB
    assert held.held.context is not None and held.held.arrays is not None
    [report] = runtime.glob("gpu-magics-kernel-*.json")
    assert str(os.getpid()) in report.name
    assert json.loads(report.read_text())["gpus"][0]["cached_memory"] == held.held.cached
    with capture_output() as captured:
        ip.run_line_magic("gpucluster", "free kernel")
    assert "this kernel gave back" in captured.stdout
    after = used_on(0)
    print(f"after free {after / GIB:.2f} GiB")
    assert after - before < GIB
    [held] = [gpu for gpu in kernel_report.kernel_memory(fresh=True) if gpu.index == 0]
    assert held.held.cached == 0


def test_free_pool_after_cell_gives_it_back_by_itself(ip: InteractiveShell, runtime: Path) -> None:
    ip.run_cell("import dask.array as da")
    with capture_output():
        ip.run_line_magic("gpucluster", "free kernel")
    before = used_on(0)
    ip.run_line_magic("config", "GpuMagics.free_pool_after_cell = True")
    try:
        with capture_output():
            ip.run_cell_magic("gpurun", "gpu --device 0 -q", CELL)
        assert used_on(0) - before < GIB
    finally:
        ip.config["GpuMagics"].pop("free_pool_after_cell", None)


@pytest.fixture
def magics(_session_shell: InteractiveShell, runtime: Path) -> Iterator[ClusterMagics]:
    instance = ClusterMagics(shell=_session_shell)
    yield instance
    instance.close()


def test_an_idle_timeout_closes_a_one_gpu_cluster_and_frees_its_gpu(
    magics: ClusterMagics, capsys: pytest.CaptureFixture[str]
) -> None:
    import dask.array as da

    stop.stop()
    before = used_on(0)
    with capture_output():
        magics.gpucluster("--gpus 0 --idle-timeout 5s --replace --name idle")
    client = queries.require_client()
    pids = [int(pid) for pid in client.run(os.getpid).values()]
    x = da.random.random((20_000, 20_000), chunks=(5_000, 5_000))
    assert float((x + 1).sum().compute()) > 0
    assert used_on(0) - before > GIB // 4  # the worker holds its context and pool
    seen: list[str] = []
    wait_for(lambda: seen.append(capsys.readouterr().out) or "closed cluster 'idle'" in "".join(seen), 40, "closing")
    assert queries.active() is None
    wait_for(lambda: used_on(0) - before < GIB // 4, 30, "the worker's memory to go")
    import psutil

    assert not any(psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE for pid in pids)


@pytest.mark.skipif(GPU_COUNT < 2, reason="needs 2 GPUs: one kept busy by another process, one free")
def test_gpus_free_leaves_the_gpu_another_process_keeps_busy(magics: ClusterMagics) -> None:
    stop.stop()
    busy = gpus.inventory().devices()[0]
    load = textwrap.dedent("""
        import sys, cupy
        taken = cupy.zeros((8 * 2**30) // 8)  # 8 GiB
        a = cupy.random.random((4096, 4096))
        print("loaded", flush=True)
        while True:
            a = a @ a
            a /= cupy.abs(a).max()
    """)
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": busy.cuda_id}
    loader = subprocess.Popen([sys.executable, "-c", load], env=env, stdout=subprocess.PIPE, text=True)
    try:
        assert loader.stdout is not None and loader.stdout.readline().strip() == "loaded"
        time.sleep(2)  # a few samples of it busy
        with capture_output() as captured:
            magics.gpucluster("--gpus free --replace --name free")
        line = captured.stdout.splitlines()[0]
        print("\n" + line)
        assert line.startswith("%gpucluster --gpus free: chose GPU") and "not GPU 0:" in line
        current = queries.active()
        assert current is not None and busy.cuda_id not in current.gpu_ids
        assert gpus.inventory().devices()[1].cuda_id in current.gpu_ids
    finally:
        loader.kill()
        loader.wait(timeout=30)
        stop.stop()
