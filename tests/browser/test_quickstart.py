"""examples/quickstart.ipynb in real JupyterLab in headless Chromium, as a newcomer meets it: it opens unmodified,
no popup covers it, Run All succeeds, and every command its outputs hint at, run as printed, succeeds. The server
gets start.sh's settings (scripts/lab-settings), the kernel the simulated GPUs of the other browser tests."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from .conftest import HERE, REPO, Lab

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.timeout(900)]


@pytest.fixture
def quickstart_lab(tmp_path: Path, requirements: None) -> Iterator[Lab]:
    server = Lab(tmp_path)
    server.extra_args = [f"--LabApp.app_settings_dir={REPO / 'scripts' / 'lab-settings'}"]  # as start.sh runs it
    shutil.copy(REPO / "examples" / "quickstart.ipynb", server.root / "quickstart.ipynb")
    try:
        server.start()
        yield server
    finally:
        server.close()


def test_the_quickstart_runs_top_to_bottom_and_its_hints_work(quickstart_lab: Lab) -> None:
    result = subprocess.run(
        ["node", str(HERE / "quickstart.mjs"), quickstart_lab.url, quickstart_lab.token],
        env={**os.environ, "ARTIFACTS": str(REPO / "test-artifacts" / "browser")},
        capture_output=True,
        text=True,
        timeout=840,
    )
    print(result.stdout)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "[quickstart] ok" in result.stdout
