"""``GpuMagicsServer.idle_reclaim_min`` on a real GPU: a jupyter-server on NVML and a kernel whose CuPy pool caches
2 GiB on an idle GPU; the server has the kernel give the cache back (NVML's figure for the kernel drops by it), the
kernel's next cell says so, ``/metrics`` counts it, and the array the kernel kept is intact. And PyTorch's caching
allocator is emptied where a process already uses it."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from jupyter_client.blocking.client import BlockingKernelClient

from gpu_magics.cluster.control.verbs.reclaim import torch_release
from tests.gpu.test_metrics_gpu import nvml_processes, run, wait
from tests.prometheus.harness import JupyterServer

GIB = 2**30
CELL = """
%load_ext gpu_magics
import cupy, os
kept = cupy.arange(2**20, dtype='float32')  # 4 MiB the user keeps
cached = cupy.ones(2**29, dtype='float32')  # 2 GiB, let go: CuPy's pool caches it
del cached
cupy.cuda.Device().synchronize()
print(os.getpid())
"""


@pytest.fixture
def server(tmp_path: Path) -> Iterator[JupyterServer]:
    env = {"GPU_MAGICS_SOURCE": "nvml", "GPU_MAGICS_RUNTIME_DIR": str(tmp_path / "gpu-magics-runtime"),
           "CUDA_VISIBLE_DEVICES": os.environ.get("CUDA_VISIBLE_DEVICES", "0")}  # fmt: skip
    options = ("--GpuMagicsServer.metrics_interval=0.5", "--GpuMagicsServer.slow_interval=0.5",
               "--GpuMagicsServer.idle_reclaim_min=0.05")  # fmt: skip
    started = JupyterServer(tmp_path, env, *options)
    try:
        started.start()
        yield started
    finally:
        started.stop()


def freed(server: JupyterServer) -> float:
    found = re.search(r'^gpu_magics_idle_reclaims_total\{action="freed_cache"\} (\S+)$', server.api("GET", "metrics"),
                      re.MULTILINE)  # fmt: skip
    return float(found.group(1)) if found else -1.0


def test_the_kernel_s_cached_memory_is_given_back_on_an_idle_gpu(server: JupyterServer) -> None:
    kernel_id = str(server.api("POST", "api/kernels", {"name": "python3"})["id"])
    client = BlockingKernelClient(connection_file=str(server.runtime / f"kernel-{kernel_id}.json"))
    client.load_connection_file()
    client.start_channels(hb=False)
    try:
        client.wait_for_ready(timeout=90)
        assert freed(server) == 0
        pid = int(run(client, CELL).strip().splitlines()[-1])
        held = wait(lambda: nvml_processes().get(pid), 30, "NVML to list the kernel")
        assert held >= 2 * GIB
        wait(lambda: freed(server) >= 1, 120, "the reclaim (the GPU must sit idle: nothing else may run on it)")
        after = wait(lambda: (n := nvml_processes().get(pid)) is not None and n < held - GIB and n, 30, "NVML")
        assert held - after >= 2 * GIB - 64 * 2**20
        text = run(client, "print(bool((kept == cupy.arange(2**20, dtype='float32')).all()))")
        assert re.search(r"the server \(GpuMagicsServer\.idle_reclaim_min\) gave back 2\.\d GiB of cached", text), text
        assert text.strip().splitlines()[-1] == "True"  # the array the user kept is intact
    finally:
        client.stop_channels()
        server.delete_kernel(kernel_id)


def test_pytorch_s_cache_is_emptied_where_the_process_uses_it() -> None:
    torch: Any = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("PyTorch was built without CUDA")
    tensor = torch.ones(2**28, device="cuda")  # 1 GiB
    del tensor
    torch.cuda.synchronize()
    reserved = torch.cuda.memory_reserved()
    assert reserved >= GIB
    assert torch_release() >= GIB and torch.cuda.memory_reserved() == 0
    assert torch_release() == 0  # nothing left to give back
