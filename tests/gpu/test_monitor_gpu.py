"""The monitor on real GPUs: NVML readings, and the per-GPU summary of a %%gpurun cell."""

from __future__ import annotations

import dataclasses

from IPython.core.interactiveshell import InteractiveShell

from gpu_magics.monitor.sampler import Sampler, shutdown_sampler
from gpu_magics.monitor.sources import make_source

BUSY_CELL = """
import time
import dask.array as da
t_x = da.random.normal(10, 1, size=(40_000, 40_000), chunks=5_000)
t_began = time.time()
while time.time() - t_began < 2:  # a few monitor samples of a busy GPU, however fast it computes (0.1 s on an H200)
    t_value = (t_x + 1)[::2, ::2].mean().compute()
t_value
"""


def test_nvml_reads_every_visible_gpu() -> None:
    import cupy

    sampler = Sampler(make_source("nvml"))
    try:
        snapshot = sampler.tick()
    finally:
        sampler.close()
    assert snapshot.status is None
    assert len(snapshot.gpus) == cupy.cuda.runtime.getDeviceCount()
    for reading in snapshot.gpus:
        assert reading.error is None
        assert reading.memory_total and reading.memory_total > 10 * 2**30
        assert reading.gpu_util is not None and reading.temperature is not None and reading.power is not None
        unsupported = [f.name for f in dataclasses.fields(reading) if getattr(reading, f.name) is None]
        print(f"GPU {reading.index} {reading.name}: fields NVML left as None: {unsupported or 'none'}")


def test_gpurun_summary_sees_the_gpu_busy(ip: InteractiveShell) -> None:
    shutdown_sampler()
    ip.run_line_magic("gpumonitor", "--interval 0.1")
    try:
        ip.run_cell_magic("gpurun", "gpu -o t_r", BUSY_CELL)
    finally:
        ip.run_line_magic("gpumonitor", "--stop")
    figures = ip.user_ns["t_r"].monitor
    assert figures.readings == "gpu" and [g.index for g in figures.gpus] == [0]
    gpu = figures.gpus[0]
    print(f"gpu cell: {figures} over {figures.duration:.2f} s, {figures.samples} samples")
    assert gpu.peak_gpu_util is not None and gpu.peak_gpu_util > 20
    assert gpu.peak_memory_used is not None and gpu.peak_memory_used > 2**30


def test_multi_gpu_summary_sees_every_gpu_busy(ip: InteractiveShell) -> None:
    import cupy
    import pytest

    count = cupy.cuda.runtime.getDeviceCount()
    if count < 2:
        pytest.skip("needs two or more GPUs")
    shutdown_sampler()
    ip.run_line_magic("gpucluster", "--no-dashboard")
    ip.run_line_magic("gpumonitor", "--interval 0.1")
    try:
        ip.run_cell_magic("gpurun", "multi-gpu -o t_r", BUSY_CELL.replace("40_000", "80_000"))
    finally:
        ip.run_line_magic("gpumonitor", "--stop")
        ip.run_line_magic("gpucluster", "stop")
    result = ip.user_ns["t_r"]
    figures = result.monitor
    print(f"multi-gpu cell on {result.hardware}: {figures} over {figures.duration:.2f} s")
    assert len(figures.gpus) == count
    for gpu in figures.gpus:
        assert gpu.peak_gpu_util is not None and gpu.peak_gpu_util >= 10, gpu
        assert gpu.peak_memory_used is not None and gpu.peak_memory_used > 2**30, gpu
