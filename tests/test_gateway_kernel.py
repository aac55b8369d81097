"""A gateway cluster made from a real kernel (jupyter_client, as JupyterLab drives it) is shut down on the gateway
when the kernel shuts down; one kept with ``stop --keep`` outlives it and a new kernel connects to it."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.gateway_server import GatewayServer, gateway_server
from tests.test_kernel_faults import loaded_kernel

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
        assert text.strip().splitlines()[-1] == "10"
        kernel.ok("%gpucluster stop --close")
    assert wait_until_empty(server) == []
