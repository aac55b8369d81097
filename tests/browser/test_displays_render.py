"""The rich displays (arrays, graph summaries, widget mode) render in real JupyterLab in headless Chromium."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from .conftest import HERE, REPO, Lab

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.timeout(600)]


def test_displays_render(lab: Lab) -> None:
    shutil.copy(REPO / "tests" / "notebooks" / "displays.ipynb", lab.root / "displays.ipynb")
    result = subprocess.run(
        ["node", str(HERE / "displays.mjs"), lab.url, lab.token, "displays.ipynb"],
        env={**os.environ, "ARTIFACTS": str(REPO / "test-artifacts" / "browser")},
        capture_output=True,
        text=True,
        timeout=540,
    )
    print(result.stdout)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "all displays rendered" in result.stdout
