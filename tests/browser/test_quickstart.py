"""examples/quickstart.ipynb in real JupyterLab in headless Chromium, as a newcomer meets it: it opens unmodified,
no popup covers it, Run All succeeds, and every command its outputs hint at, run as printed, succeeds. The server
gets start.sh's settings (scripts/lab-settings), the kernel the simulated GPUs of the other browser tests."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from .conftest import REPO, Lab, run_browser_script

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
    result = run_browser_script(quickstart_lab, "quickstart.mjs", timeout=840)
    assert "[quickstart] ok" in result.stdout
