"""A cluster on two hosts in the side panel, in real JupyterLab on headless Chromium: a notebook attaches to a
scheduler that Dask's CLI started, with workers on 127.0.0.2 and 127.0.0.3 (two simulated GPUs each), on a server
and kernel with no GPU of their own. Screenshots: test-artifacts/browser/hosts-{light,dark}.png."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import nbformat
import pytest

from tests.cli_cluster import cli_cluster

from .conftest import HERE, REPO, Lab

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.timeout(600)]

SPEC = REPO / "tests" / "data" / "worker_gpus.json"
HOSTS = ("127.0.0.2", "127.0.0.3")


@pytest.fixture
def lab_without_gpu(tmp_path: Path, requirements: None) -> Iterator[Lab]:
    server = Lab(tmp_path)
    server.env["GPU_MAGICS_SOURCE"] = "fake:0"  # the server and its kernels see no GPU
    server.start()
    try:
        yield server
    finally:
        server.close()


def test_the_panel_lists_each_hosts_gpus_and_memory_by_notebook(lab_without_gpu: Lab, tmp_path: Path) -> None:
    workers = {f"node-{host[-1]}": (host, {"GPU_MAGICS_SOURCE": f"fake:{SPEC}"}) for host in HOSTS}
    with cli_cluster(workers, tmp_path / "cli") as remote:
        notebook = nbformat.v4.new_notebook(
            cells=[
                nbformat.v4.new_code_cell("%load_ext gpu_magics"),
                nbformat.v4.new_code_cell(f"%gpucluster --address {remote.address} --name remote"),
            ],
            metadata={"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}},
        )
        nbformat.write(notebook, lab_without_gpu.root / "hosts.ipynb")
        result = subprocess.run(
            [
                "node",
                str(HERE / "cluster_hosts.mjs"),
                lab_without_gpu.url,
                lab_without_gpu.token,
                "hosts.ipynb",
                *HOSTS,
            ],
            env={**os.environ, "ARTIFACTS": str(REPO / "test-artifacts" / "browser"), "CLUSTER_NAME": "remote"},
            capture_output=True,
            text=True,
            timeout=540,
        )
    print(result.stdout)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "passed" in result.stdout
