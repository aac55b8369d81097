"""A GPU cluster started outside the kernel, as cluster managers start one: ``dask scheduler`` plus
``dask cuda worker`` from Dask's own CLI, attached with ``%gpucluster --address``.

On a machine with 3 or more GPUs the workers get GPUs 2.. and the kernel sees only GPU 0 (the issue's setup);
on one or two GPUs the worker gets the last GPU and listens on 127.0.0.2, so it counts as another host. Either
way the workers are found to have GPUs by asking them, the seed workload runs on CuPy chunks there, and the
cell's figures show the workers' GPUs and not the kernel's own.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output

from gpu_magics import gpus
from gpu_magics.cluster.control import answers, queries
from gpu_magics.cluster.control.verbs import stop
from tests.cli_cluster import CliCluster, cli_cluster
from tests.gpu.conftest import GPU_COUNT

SEED = (
    "import dask.array as da\n"
    "t_x = da.random.normal(10, 1, size=(40_000, 40_000), chunks=10_000)\n"
    "(t_x + 1)[::2, ::2].mean().compute()\n"
)


def worker_gpus() -> list[int]:
    return list(range(2, GPU_COUNT)) if GPU_COUNT >= 3 else [GPU_COUNT - 1]


def _other_loopback() -> str:
    """127.0.0.2 where this machine lets a process listen there (it then stands for another host)."""
    try:
        with socket.socket() as probe:
            probe.bind(("127.0.0.2", 0))
        return "127.0.0.2"
    except OSError:
        return "127.0.0.1"


WORKER_HOST = "127.0.0.1" if GPU_COUNT >= 3 else _other_loopback()


@pytest.fixture(scope="module")
def dask_cuda_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[CliCluster]:
    # one ``dask cuda worker`` per GPU, each with its own name (one command given two GPUs names both workers alike,
    # and the scheduler refuses the second: the test then saw one worker that used one of its two GPUs)
    workers = {
        f"cuda-{index}": (WORKER_HOST, {"CUDA_VISIBLE_DEVICES": str(index), "GPU_MAGICS_SOURCE": "nvml"})
        for index in worker_gpus()
    }
    with cli_cluster(
        workers,
        tmp_path_factory.mktemp("dask-cuda-cli"),
        worker_command=("dask", "cuda", "worker"),
        worker_args=(),
    ) as started:
        yield started


@pytest.fixture
def attached(
    ip: InteractiveShell, dask_cuda_cluster: CliCluster, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> Iterator[None]:
    monkeypatch.setenv("GPU_MAGICS_RUNTIME_DIR", str(tmp_path / "runtime"))
    if GPU_COUNT >= 3:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
        previous = gpus.set_inventory(None)
    else:
        previous = gpus.inventory()
    stop.stop()
    try:
        with capture_output():
            ip.run_line_magic("gpucluster", f"--address {dask_cuda_cluster.address} --name cli")
        telemetry = queries.telemetry()
        assert telemetry is not None
        deadline = time.monotonic() + 60
        while len(telemetry.gpus()) < len(worker_gpus()) and time.monotonic() < deadline:
            time.sleep(0.2)
        yield
    finally:
        stop.stop()
        gpus.set_inventory(previous)


def expected_labels() -> set[str]:
    if GPU_COUNT >= 3:  # GPUs the kernel does not see: named by host and number
        return {f"{socket.gethostname()} · GPU {index}" for index in worker_gpus()}
    if WORKER_HOST == "127.0.0.1":  # the kernel's own GPU, on its own host: its own numbering
        return {f"GPU {worker_gpus()[0]}"}
    return {f"{socket.gethostname()} · GPU {worker_gpus()[0]}"}


def test_dask_cuda_workers_are_found_to_have_gpus(ip: InteractiveShell, attached: None) -> None:
    assert queries.has_gpu_workers()
    info = answers.status()
    assert "NVIDIA" in info.hardware and "CPU" not in info.hardware
    labels = {gpu.label for worker in info.workers for gpu in worker.gpus}
    assert labels == expected_labels()


def test_seed_runs_on_cupy_chunks_on_the_workers_gpus(ip: InteractiveShell, attached: None) -> None:
    with capture_output():
        value = ip.run_cell_magic("gpurun", "multi-gpu -o t_attached", SEED)
    assert float(value) == pytest.approx(11.0, abs=0.01)
    result = ip.user_ns["t_attached"]
    assert not any("numpy" in note.lower() or "cpu" in note.lower() for note in result.notes), result.notes
    figures = result.monitor
    assert figures.readings == "gpu"
    assert {gpu.label for gpu in figures.gpus} == expected_labels()  # and no GPU the workers do not use
    telemetry = queries.telemetry()
    assert telemetry is not None
    deadline = time.monotonic() + 15
    held: list[int] = []
    while time.monotonic() < deadline and not held:
        held = [g.gpu.process_memory or 0 for g in telemetry.gpus() if (g.gpu.process_memory or 0) > 0]
        time.sleep(0.5)
    assert held, "the workers report what their CuPy/RMM pools hold"


LONG = (
    "import dask.array as da\n"
    "t_y = da.random.normal(10, 1, size=(100_000, 100_000), chunks=10_000)\n"
    "t_means = [float((t_y + k)[::2, ::2].mean().compute()) for k in range(6)]\n"
)


def test_the_per_gpu_line_and_the_split_see_the_same_cell(ip: InteractiveShell, attached: None) -> None:
    """A few seconds of GPU work on the attached worker: the split says the GPU was busy, and the per-GPU line
    under it (the workers' reports from the cell's own window) says so too; a short cell after it does not show
    the long cell's figures; ``%gpucluster status`` right after shows what the worker holds now."""
    with capture_output():
        ip.run_cell_magic("gpurun", "multi-gpu -o t_long", LONG)
    long = ip.user_ns["t_long"]
    assert long.split is not None and long.split.share("compute") > 0.6, long.split
    utils = [gpu.mean_gpu_util for gpu in long.monitor.gpus]
    assert utils and all(util is not None and util > 20 for util in utils), str(long.monitor)
    time.sleep(2.0)  # NVML's utilization is a trailing average (up to a second): the long cell's end rolls out of it
    with capture_output():
        ip.run_cell_magic("gpurun", "multi-gpu -o t_short", "import time\ntime.sleep(1.5)\n")
    short = ip.user_ns["t_short"]
    assert all(gpu.mean_gpu_util is None or gpu.mean_gpu_util < 20 for gpu in short.monitor.gpus), str(short.monitor)
    info = answers.status()
    held = [gpu.process_memory or 0 for worker in info.workers for gpu in worker.gpus]
    assert held and max(held) > 2**30, held  # the pool that the 80 GB cells left, not a stale 1.5 MiB
