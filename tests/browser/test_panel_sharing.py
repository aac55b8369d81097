"""The side panel on a shared GPU server, end to end, at the default sidebar width, light and dark: a GPU busy with
another user's job is marked; the notebook's kernel and its cluster's worker say what they hold three ways (arrays,
cached, context), and the notebook's row folds the names that hold its kernel's memory; "Free cached" runs in the
kernel and gives the cache back; the cluster shows the time left before its idle timeout closes it and that the
notebook's plain cells run on it.
Screenshots: test-artifacts/browser/sharing-*.png."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import nbformat
import pytest

from .conftest import HERE, REPO, Lab

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.timeout(600)]

ARTIFACTS = REPO / "test-artifacts" / "browser"
SHARED = REPO / "tests" / "data" / "shared_gpus.json"
NOTEBOOK = "train.ipynb"
CLUSTER = "shared"
CAP = "8GiB"


STAND_IN = """class DeviceArray:
    \"\"\"A GPU array as libraries offer one (the CUDA array interface), standing in for a CuPy array.\"\"\"

    def __init__(self, count):
        self.interface = {"data": (0x7F00_0000_0000, False), "shape": (count,), "typestr": "<f4", "version": 3}

    @property
    def __cuda_array_interface__(self):
        return self.interface


embeddings = DeviceArray(2**27)"""


def two_shared_gpus() -> dict[str, object]:
    """GPU 0 busy with another user's job (where the cluster's worker computes too), GPU 1 the notebook's."""
    spec = json.loads(SHARED.read_text())
    busy, mine = spec["gpus"][0], spec["gpus"][1]
    busy["pools"] = {"worker": mine["pools"].pop("worker")}
    busy["processes"] = [{**process, "sm_util": 96} for process in busy["processes"]]  # the job NVML samples busy
    mine["gpu_util"] = 0  # the notebook's GPU sits idle: no process ran there lately
    return {"gpus": [busy, mine]}


@pytest.fixture
def shared_lab(tmp_path: Path, requirements: None) -> Iterator[Lab]:
    spec = tmp_path / "shared.json"
    spec.write_text(json.dumps(two_shared_gpus()))
    server = Lab(tmp_path)
    server.env["GPU_MAGICS_SOURCE"] = f"fake:{spec}"
    server.env["GPU_MAGICS_FAKE_STATE"] = str(tmp_path / "fake-state.json")  # kernel, workers and server share it
    server.extra_args.append(f"--GpuMagicsServer.memory_cap={CAP}")  # the admin's cap on each notebook, each GPU
    try:
        server.start()
        yield server
    finally:
        server.close()


def test_panel_on_a_shared_server(shared_lab: Lab) -> None:
    notebook = nbformat.v4.new_notebook(
        cells=[
            nbformat.v4.new_code_cell("%load_ext gpu_magics\n%config ClusterMagics.telemetry_interval = 0.5"),
            nbformat.v4.new_code_cell(f"%gpucluster --cpu-workers 1 --name {CLUSTER} --idle-timeout 30m"),
            nbformat.v4.new_code_cell(STAND_IN),  # a GPU array (of the simulated GPU) that the memory list names
            nbformat.v4.new_code_cell("%gpurun multi-gpu"),  # plain cells on the cluster: its card says so
        ],
        metadata={"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}},
    )
    nbformat.write(notebook, shared_lab.root / NOTEBOOK)
    result = subprocess.run(
        ["node", str(HERE / "panel_sharing.mjs"), shared_lab.url, shared_lab.token, NOTEBOOK],
        env={**os.environ, "ARTIFACTS": str(ARTIFACTS), "CLUSTER_NAME": CLUSTER, "CAP": "8 GiB"},
        capture_output=True,
        text=True,
        timeout=540,
    )
    print(result.stdout)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "passed" in result.stdout
    for theme in ("light", "dark"):
        for shot in ("cards", "cluster", "memory", "panel"):
            assert (ARTIFACTS / f"sharing-{shot}-{theme}.png").is_file()
    assert (ARTIFACTS / "sharing-freed-dark.png").is_file()
    for theme in ("light", "dark"):
        assert (ARTIFACTS / f"sharing-capped-{theme}.png").is_file()
