"""SPMD ranks on GPU workers of two "hosts" (127.0.0.2 and 127.0.0.3, simulated GPUs), started with Dask's CLI as
cluster managers start them, each worker given its GPU through ``CUDA_VISIBLE_DEVICES`` (as dask-cuda does):
ranks by host then GPU, each rank's ``LOCAL_RANK`` pointing at its own worker's GPU, and two workers on one GPU
refused in one line before any rank starts."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output

from gpu_magics import gpus
from gpu_magics.cluster.control import queries
from gpu_magics.cluster.control.verbs import stop
from tests.cli_cluster import CliCluster, cli_cluster
from tests.waiting import wait_for

pytestmark = pytest.mark.slow

HOST_A, HOST_B = "127.0.0.2", "127.0.0.3"
FAKE = {"GPU_MAGICS_SOURCE": "fake:2"}
ENV_CELL = """%%gpurun spmd -q -o t_env
import os
from gpu_magics import gpus
own = gpus.inventory().devices()  # what this rank process sees, as CUDA would number it
local = int(os.environ["LOCAL_RANK"])
(os.environ["RANK"], os.environ["NODE_RANK"], os.environ["LOCAL_RANK"], os.environ["MASTER_ADDR"],
 own[local].uuid, os.environ["GPU_MAGICS_SPMD_DEVICE"])
"""
WORKER_GPU = "from gpu_magics import gpus\ngpus.inventory().devices()[0].uuid"


@pytest.fixture
def attached(ip: InteractiveShell, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[CliCluster]:
    monkeypatch.setenv("GPU_MAGICS_SOURCE", "fake:0")
    monkeypatch.setenv("GPU_MAGICS_RUNTIME_DIR", str(tmp_path / "runtime"))
    previous = gpus.set_inventory(None)
    workers = {
        "a-second": (HOST_A, {**FAKE, "CUDA_VISIBLE_DEVICES": "1,0"}),  # dask-cuda's rotation: its GPU first
        "a-first": (HOST_A, {**FAKE, "CUDA_VISIBLE_DEVICES": "0,1"}),
        "b-only": (HOST_B, {**FAKE, "CUDA_VISIBLE_DEVICES": "0,1"}),
    }
    stop.stop()
    try:
        with cli_cluster(workers, tmp_path / "logs") as remote:
            with capture_output():
                ip.run_line_magic("gpucluster", f"--address {remote.address} --name two-hosts")
            telemetry = queries.telemetry()
            assert telemetry is not None
            wait_for(lambda: len(telemetry.gpus()) >= 3, what="the workers' GPUs reported")
            yield remote
            stop.stop()
    finally:
        gpus.set_inventory(previous)


def test_ranks_go_by_host_then_gpu_and_local_rank_is_each_workers_own_gpu(
    ip: InteractiveShell, attached: CliCluster
) -> None:
    with capture_output():
        result = ip.run_cell(ENV_CELL)
    assert result.success, result.error_in_exec
    values = ip.user_ns["t_env"].values
    assert [value[:4] for value in values] == [
        ("0", "0", "0", HOST_A),
        ("1", "0", "1", HOST_A),
        ("2", "1", "0", HOST_A),
    ]
    assert {value[5] for value in values} == {"gpu"}
    client = queries.require_client()
    by_name = {info["name"]: address for address, info in client.scheduler_info(n_workers=-1)["workers"].items()}
    worker_gpus = {name: client.run(lambda: gpus.inventory().devices()[0].uuid, workers=[address])[address]
                   for name, address in by_name.items()}  # fmt: skip
    # rank 0 is a-first (GPU 0 of host A), rank 1 a-second (GPU 1), rank 2 b-only: each on its worker's own GPU
    assert [value[4] for value in values] == [worker_gpus["a-first"], worker_gpus["a-second"], worker_gpus["b-only"]]


def test_two_workers_on_one_gpu_are_refused_before_any_rank_starts(ip: InteractiveShell, attached: CliCluster) -> None:
    attached.add_worker("a-again", HOST_A, {**FAKE, "CUDA_VISIBLE_DEVICES": "1"})
    wait_for(lambda: len(queries.require_client().scheduler_info(n_workers=-1)["workers"]) == 4, what="4 workers")
    telemetry = queries.telemetry()
    assert telemetry is not None
    wait_for(lambda: len(telemetry.worker_gpus()) == 4, what="the new worker's GPU reported")
    with pytest.raises(UsageError) as caught:
        ip.run_cell_magic("gpurun", "spmd", "x = 1")
    message = str(caught.value)
    assert "share one GPU (127.0.0.2 · GPU 1)" in message and "'a-again'" in message and "\n" not in message
