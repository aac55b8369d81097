"""A gateway cluster made from a real kernel (jupyter_client, as JupyterLab drives it) is shut down on the gateway
when the kernel shuts down; one kept with ``stop --keep`` outlives it and a new kernel connects to it."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.gateway_server import GatewayServer, gateway_server, gateway_without_workers
from tests.test_kernel_faults import loaded_kernel
from tests.waiting import wait_for

pytest.importorskip("dask_gateway_server", reason="needs dask-gateway-server (the test extra)")
pytestmark = pytest.mark.slow


@pytest.fixture
def server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[GatewayServer]:
    with gateway_server(tmp_path / "gateway") as started:
        for key, value in started.env().items():  # the kernels' dask config names the gateway, as a hub's does
            monkeypatch.setenv(key, value)
        yield started


def wait_until_empty(server: GatewayServer, timeout: float = 30) -> list[dict[str, object]]:
    deadline = time.monotonic() + timeout
    while (left := server.clusters()) and time.monotonic() < deadline:
        time.sleep(0.25)
    return left


def test_the_kernels_shutdown_shuts_its_gateway_cluster_down(server: GatewayServer, tmp_path: Path) -> None:
    with loaded_kernel(tmp_path) as kernel:
        kernel.ok("%gpucluster --gateway --workers 1", timeout=120)
        kernel.ok("import gpu_magics; print(len(gpu_magics.client().scheduler_info()['workers']))")
        assert [report["status"] for report in server.clusters()] == ["RUNNING"]
        kernel.manager.shutdown_kernel(now=False)  # a shutdown request, as JupyterLab sends it
    assert wait_until_empty(server) == []


def test_a_kept_cluster_outlives_its_kernel_and_the_next_kernel_connects(server: GatewayServer, tmp_path: Path) -> None:
    for name in ("first", "second"):
        (tmp_path / name).mkdir()
    with loaded_kernel(tmp_path / "first") as kernel:
        kernel.ok("%gpucluster --gateway --workers 1", timeout=120)
        said = kernel.ok("%gpucluster stop --keep")
        assert "keeps running" in said
    (report,) = server.clusters()
    assert report["status"] == "RUNNING"
    with loaded_kernel(tmp_path / "second") as kernel:
        listed = kernel.ok("%gpucluster --gateway --list")
        assert str(report["name"]) in listed
        kernel.ok(f"%gpucluster --gateway --connect {report['name']}", timeout=120)
        text = kernel.ok(
            "%%gpurun multi-gpu -q\nimport dask.array as da\nprint(int(da.ones(10, chunks=5).sum().compute()))"
        )
        assert text.rstrip().endswith("10")  # after the line that says it waited for the cluster
        kernel.ok("%gpucluster stop --close")
    assert wait_until_empty(server) == []


def test_the_start_goes_on_in_the_background_and_the_next_cell_waits_for_it(
    server: GatewayServer, tmp_path: Path
) -> None:
    with loaded_kernel(tmp_path) as kernel:
        text = kernel.ok("%gpucluster --gateway --workers 2 --name bg", timeout=60)
        assert "starting 'bg'" in text and "Cluster 'bg'" not in text  # its line: the start goes on
        workers = kernel.ok("import gpu_magics; print(len(gpu_magics.client().scheduler_info()['workers']))")
        assert workers.strip().splitlines()[-1] == "2"
        assert "Dask Gateway" in kernel.ok("%gpucluster status")
        kernel.ok("%gpucluster stop")
    assert wait_until_empty(server) == []


@pytest.fixture
def slow_workers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[GatewayServer]:
    with gateway_without_workers(tmp_path / "gateway") as started:
        for key, value in started.env().items():
            monkeypatch.setenv(key, value)
        yield started


def test_stop_during_the_start_shuts_the_gateway_cluster_down(slow_workers: GatewayServer, tmp_path: Path) -> None:
    with loaded_kernel(tmp_path) as kernel:
        kernel.ok("%gpucluster --gateway --workers 1 --name waiting", timeout=60)
        wait_for(slow_workers.clusters, 120, "the gateway to make the cluster")
        assert "stopped 'waiting' while it was starting" in kernel.ok("%gpucluster stop", timeout=60)
        assert wait_until_empty(slow_workers) == []
        assert "no cluster is running" in kernel.ok("%gpucluster status")


def test_a_plain_cell_right_after_a_gateway_start_runs_on_its_workers(server: GatewayServer, tmp_path: Path) -> None:
    """A Run All: the plain cells are queued with the start; they run on the gateway's workers, not here."""
    with loaded_kernel(tmp_path) as kernel:
        cells = [
            "%gpucluster --gateway --workers 1 --name runall --client c",
            "import os, dask.array as da\n"
            "pids = set(da.ones(40, chunks=10).map_blocks(lambda b: b * 0 + os.getpid()).compute().tolist())\n"
            "print('here' if os.getpid() in pids else 'elsewhere')",
            "import distributed; print(distributed.get_client() is c)",
        ]
        ids = [kernel.start(cell) for cell in cells]
        replies = [kernel.finish(msg_id, timeout=120) for msg_id in ids]
        assert all(reply["status"] == "ok" for reply, _ in replies), replies
        assert replies[1][1].strip() == "elsewhere" and replies[2][1].strip() == "True"
        kernel.ok("%gpucluster stop")
    assert wait_until_empty(server) == []
