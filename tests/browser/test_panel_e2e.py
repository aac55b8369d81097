"""The side panel in real JupyterLab in headless Chromium: fake GPUs update; a cluster a notebook starts is
listed and stopped from the panel. Screenshots are kept under test-artifacts/."""

from __future__ import annotations

import os
import subprocess

import nbformat
import pytest

from .conftest import HERE, REPO, Lab

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.timeout(600)]


def test_panel_end_to_end(lab: Lab) -> None:
    notebook = nbformat.v4.new_notebook(
        cells=[
            nbformat.v4.new_code_cell("%load_ext gpu_magics"),
            nbformat.v4.new_code_cell("%gpucluster start --cpu-workers 1 --name e2e"),
        ],
        metadata={"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}},
    )
    nbformat.write(notebook, lab.root / "e2e.ipynb")
    artifacts = REPO / "test-artifacts" / "browser"
    result = subprocess.run(
        ["node", str(HERE / "e2e.mjs"), lab.url, lab.token, "e2e.ipynb"],
        env={**os.environ, "ARTIFACTS": str(artifacts), "CLUSTER_NAME": "e2e"},
        capture_output=True,
        text=True,
        timeout=540,
    )
    print(result.stdout)
    assert result.returncode == 0, result.stdout + result.stderr
    assert not list(lab.runtime.glob("gpu-magics-cluster-*.json")), "the cluster record is still there"
