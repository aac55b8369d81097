"""SPMD cells as JupyterLab shows them (tests/browser/spmd_view.mjs): the status rows, merged output and a failing
rank, light and dark, at the default sidebar width."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from .conftest import HERE, REPO, Lab

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.timeout(600)]


def test_spmd_cells_render(lab: Lab) -> None:
    shutil.copy(REPO / "tests" / "notebooks" / "spmd_view.ipynb", lab.root / "spmd_view.ipynb")
    result = subprocess.run(
        ["node", str(HERE / "spmd_view.mjs"), lab.url, lab.token, "spmd_view.ipynb"],
        env={**os.environ, "ARTIFACTS": str(REPO / "test-artifacts" / "browser")},
        capture_output=True,
        text=True,
        timeout=540,
    )
    print(result.stdout)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "every SPMD view rendered" in result.stdout
