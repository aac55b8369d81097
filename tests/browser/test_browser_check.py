"""JupyterLab's browser check with the extension installed: every plugin activates, no error is logged."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import HERE, REPO, lab_environment

LAB_FLAGS = ("--LabApp.expose_app_in_browser=True",)

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.timeout(300)]


def test_browser_check(tmp_path: Path, requirements: None) -> None:
    env = lab_environment(tmp_path)
    env["CHECK_PLUGIN"] = "gpu-magics:plugin"
    env["JLAB_BROWSER_CHECK_OUTPUT"] = str(REPO / "test-artifacts" / "browser-check")
    result = subprocess.run(
        [
            sys.executable,
            str(HERE / "browser_check.py"),
            "--allow-root",
            f"--ServerApp.root_dir={tmp_path}",
            "--LabApp.expose_app_in_browser=True",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
        cwd=tmp_path,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert "Browser test complete" in output
    assert "gpu_magics | extension was successfully loaded" in output
