"""A kernel process that sees no GPU (``CUDA_VISIBLE_DEVICES=""``) attached to a ``dask cuda worker`` on a GPU
(Dask's CLI, as a cluster manager starts one): the seed runs with CuPy chunks on the worker's GPU, the value
comes back as NumPy, and the worker's telemetry shows its GPU busy and holding the chunks.

The kernel runs in a process of its own: this test process has already made a CUDA context.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cli_cluster import CliCluster, cli_cluster
from tests.gpu.conftest import GPU_COUNT
from tests.gpu.test_attached_gpu import WORKER_HOST

ROOT = Path(__file__).resolve().parents[2]

KERNEL = r"""
import json, sys, time
from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output
from gpu_magics.cluster.control import answers, queries
from gpu_magics.cluster.control.verbs import stop

ip = InteractiveShell.instance()
ip.run_line_magic("load_ext", "gpu_magics")
began = time.perf_counter()
with capture_output():
    ip.run_line_magic("gpucluster", sys.argv[1])
    answers.status()
start_s = time.perf_counter() - began
telemetry = queries.telemetry()
deadline = time.monotonic() + 60
while telemetry is not None and not telemetry.gpus() and time.monotonic() < deadline:
    time.sleep(0.2)
size, chunk = int(sys.argv[2]), int(sys.argv[3])
cell = (
    "import dask.array as da\n"
    "x = da.random.normal(10, 1, size=({size}, {size}), chunks={chunk})\n"
    "value = (x + 1)[::2, ::2].mean().compute()\n"
)
with capture_output():  # the worker's first cell pays for its CUDA context and kernels: not the one measured
    ip.run_cell_magic("gpurun", "multi-gpu -q --no-monitor", cell.format(size=2 * chunk, chunk=chunk))
cell = cell.format(size=size, chunk=chunk)
with capture_output() as shown:
    ip.run_cell_magic("gpurun", "multi-gpu -o result", cell)
result = ip.user_ns["result"]
held = [g.gpu.process_memory or 0 for g in telemetry.gpus()] if telemetry is not None else []
with capture_output() as direct:
    ip.run_cell_magic("gpurun", "multi-gpu -q --no-monitor", "import cupy\ncupy.ones(3).sum()\n")
with capture_output():  # the session backend: a plain cell on the workers' GPUs
    ip.run_line_magic("gpurun", "multi-gpu")
    ip.run_cell("plain = float((da.ones((20000, 20000), chunks=5000) * 2).sum().compute())")
    ip.run_line_magic("gpurun", "off")
print(json.dumps({
    "value": float(ip.user_ns["value"]),
    "value_type": type(ip.user_ns["value"]).__module__,
    "failed": result.failed,
    "notes": list(result.notes),
    "summary": str(result),
    "start_s": start_s,
    "best_s": result.best,
    "stderr": shown.stderr,
    "gpus": [{"label": g.label, "util": g.mean_gpu_util, "peak": g.peak_memory_used} for g in result.monitor.gpus],
    "held": held,
    "busy": result.split.share("compute") if result.split is not None else 0.0,
    "cupy_here": direct.stderr,
    "plain": ip.user_ns.get("plain"),
}))
stop.stop()
"""


def cuda_worker_env() -> dict[str, str]:
    """A ``dask cuda worker``'s environment: the last GPU, NVML, and this process's imports."""
    return {
        "CUDA_VISIBLE_DEVICES": str(GPU_COUNT - 1),
        "GPU_MAGICS_SOURCE": "nvml",
        "PYTHONPATH": os.pathsep.join(sys.path),
    }


@pytest.fixture(scope="module")
def dask_cuda_worker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[CliCluster]:
    workers = {"cuda": (WORKER_HOST, cuda_worker_env())}
    with cli_cluster(
        workers, tmp_path_factory.mktemp("gpuless"), worker_command=("dask", "cuda", "worker"), worker_args=()
    ) as started:
        yield started


def run_kernel(line: str, size: int, chunk: int, extra_env: dict[str, str] | None = None) -> dict:
    """Run the seed in a kernel process that sees no GPU, on the cluster ``%gpucluster line`` gives."""
    env = {
        **os.environ,
        "CUDA_VISIBLE_DEVICES": "",
        "GPU_MAGICS_SOURCE": "nvml",
        "PYTHONPATH": os.pathsep.join(sys.path),
        **(extra_env or {}),
    }
    done = subprocess.run(
        [sys.executable, "-c", KERNEL, line, str(size), str(chunk)],
        env=env, cwd=ROOT, capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def check(report: dict) -> None:
    assert not report["failed"], report["stderr"]
    assert report["value"] == pytest.approx(11.0, abs=1e-3)
    assert report["value_type"] == "numpy"
    assert any("this kernel has no GPU" in note for note in report["notes"]), report["notes"]
    assert report["busy"] > 0.2, report["summary"]  # the worker's tasks ran (the split, from the scheduler)
    assert report["gpus"] and max(g["peak"] or 0 for g in report["gpus"]) > 2**30, report["summary"]
    assert max(report["held"] or [0]) > 0, "the worker reports the GPU memory its chunks took"
    lines = [line for line in report["cupy_here"].splitlines() if line.strip()]
    assert len(lines) == 1 and "this kernel has no GPU" in lines[0], report["cupy_here"]
    assert report["plain"] == 2 * 20_000**2  # a plain cell under %gpurun multi-gpu, on the workers


def test_a_gpuless_kernel_runs_the_seed_on_the_workers_gpu(dask_cuda_worker: CliCluster) -> None:
    report = run_kernel(f"--address {dask_cuda_worker.address} --name gpu-workers", 20_000, 5_000)
    check(report)
    print(report["summary"])


def test_a_gpuless_kernel_runs_the_80_gb_seed(dask_cuda_worker: CliCluster) -> None:
    report = run_kernel(f"--address {dask_cuda_worker.address} --name gpu-workers", 100_000, 10_000)
    check(report)
    print(report["summary"])
