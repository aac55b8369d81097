"""A GPU that another process fills while the cluster is parked: the resume asks the driver for nothing (a restore
that finds too little memory can fail the process for good, seen with driver 580), says so in one line and leaves the
cluster parked with its data; once the memory is free again, the next resume brings it back intact."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest
from IPython.core.error import UsageError
from IPython.utils.capture import capture_output

from gpu_magics.cluster.control import kernel_cluster, queries
from gpu_magics.cluster.workers import kernel_park
from gpu_magics.magics.gpucluster import ClusterMagics
from tests.gpu.test_cluster_gpu import gpucluster

LEFT_FREE = 256 << 20  # what the filler leaves: less than a worker's CUDA context needs back
FILLER = """import sys, cupy
cupy.cuda.Device(0).use()
free, _ = cupy.cuda.runtime.memGetInfo()  # once its own context is made
cupy.cuda.runtime.malloc(free - int(sys.argv[1]))
print("filled", flush=True)
sys.stdin.read()"""


def free_bytes(uuid: str) -> int:
    import pynvml

    pynvml.nvmlInit()
    try:
        return int(pynvml.nvmlDeviceGetMemoryInfo(pynvml.nvmlDeviceGetHandleByUUID(uuid)).free)
    finally:
        pynvml.nvmlShutdown()


def test_a_resume_onto_a_gpu_another_process_filled_is_refused_in_one_line_and_tried_again(
    magics: ClusterMagics,
) -> None:
    gpucluster(magics, "--replace --name full --gpus 0")
    client = queries.require_client()

    def persist() -> float:
        import cupy
        from distributed import get_worker

        get_worker().data["full-data"] = kept = cupy.arange(2**27, dtype=cupy.float64)  # 1 GiB
        return float(kept.sum())

    total = client.submit(persist, pure=False).result()
    assert "parked 1 worker" in gpucluster(magics, "park")
    kernel_park.before_execute()  # this process is the kernel: back first, as IPython's pre_execute would bring it
    current = kernel_cluster.in_use()
    assert current is not None and current.parked is not None and current.parked.comes_back
    uuid = next(iter(current.parked.comes_back))
    assert free_bytes(uuid) > LEFT_FREE
    filler = subprocess.Popen(
        [sys.executable, "-c", FILLER, str(LEFT_FREE)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert filler.stdout is not None and filler.stdout.readline().strip() == "filled"
        with pytest.raises(UsageError) as refused, capture_output():
            magics.gpucluster("resume")
        said = str(refused.value)
        assert "cannot take their GPUs back yet (GPU " in said and "\n" not in said, said
        assert kernel_cluster.phase() is kernel_cluster.Phase.PARKED
    finally:
        filler.kill()
        filler.wait()
    assert "resumed 1 worker" in gpucluster(magics, "resume")

    def check() -> float:
        from distributed import get_worker

        kept: Any = get_worker().data["full-data"]
        return float(kept.sum())

    assert client.submit(check, pure=False).result() == total
    gpucluster(magics, "stop")
