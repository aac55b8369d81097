"""A real JupyterLab (subprocess) with the gpu-magics extensions on two fake GPUs, for the browser tests."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.free_ports import free_port

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
LABEXTENSION = REPO / "gpu_magics" / "labextension"
CHROMIUM = os.environ.get("CHROMIUM_PATH", "/usr/bin/chromium")


def missing_requirements() -> str | None:
    """Why the browser tests cannot run here, or ``None``."""
    if not Path(CHROMIUM).exists():
        return f"no Chromium at {CHROMIUM} (tests/browser/setup.sh installs it)"
    if not (HERE / "node_modules" / "playwright-core").is_dir():
        return "playwright-core is not installed (run tests/browser/setup.sh)"
    if shutil.which("node") is None:
        return "node is not on PATH"
    if not (LABEXTENSION / "package.json").exists():
        return "the labextension is not built (pip install -e . or jlpm build in labextension/)"
    return None


def _data_dir(tmp: Path) -> Path:
    """A Jupyter data dir holding the built extension (works with or without ``pip install``)."""
    data = tmp / "data"
    (data / "labextensions").mkdir(parents=True)
    (data / "labextensions" / "gpu-magics").symlink_to(LABEXTENSION, target_is_directory=True)
    return data


def _prepend(path: Path, variable: str) -> str:
    old = os.environ.get(variable)
    return os.pathsep.join([str(path), old]) if old else str(path)


def lab_environment(tmp_path: Path) -> dict[str, str]:
    """Environment for a JupyterLab with both extensions on two fake GPUs, isolated in ``tmp_path``."""
    config = tmp_path / "config"
    config.mkdir()
    (config / "jupyter_server_config.json").write_text(
        json.dumps({"ServerApp": {"jpserver_extensions": {"gpu_magics": True}}})
    )
    return {
        **os.environ,
        "JUPYTER_PATH": _prepend(_data_dir(tmp_path), "JUPYTER_PATH"),
        "JUPYTER_CONFIG_DIR": str(config),
        "JUPYTER_RUNTIME_DIR": str(tmp_path / "jupyter-runtime"),
        "GPU_MAGICS_SOURCE": "fake:2",
        "GPU_MAGICS_RUNTIME_DIR": str(tmp_path / "gpu-magics-runtime"),
        "PYTHONPATH": _prepend(REPO, "PYTHONPATH"),
    }


@pytest.fixture
def requirements() -> None:
    reason = missing_requirements()
    if reason:
        if os.environ.get("GPU_MAGICS_REQUIRE_BROWSER") == "1":  # CI: a browser test that cannot run is a failure
            pytest.fail(f"browser tests cannot run: {reason}")
        pytest.skip(reason)


class Lab:
    """A ``jupyter lab`` subprocess on a fixed port and token, so that it can be restarted in place."""

    def __init__(self, tmp_path: Path) -> None:
        self.root = tmp_path / "root"
        self.root.mkdir()
        self.env = lab_environment(tmp_path)
        self.runtime = Path(self.env["GPU_MAGICS_RUNTIME_DIR"])
        self.token = os.urandom(16).hex()
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/"
        self.log_path = tmp_path / "lab.log"
        self._log = self.log_path.open("a")
        self._process: subprocess.Popen[bytes] | None = None
        self.extra_args: list[str] = []  # more JupyterLab options, set before start()

    def start(self) -> None:
        self._process = subprocess.Popen(
            [
                sys.executable, "-m", "jupyterlab", "--no-browser", "--ServerApp.ip=127.0.0.1",
                f"--ServerApp.port={self.port}", "--ServerApp.port_retries=0",
                f"--IdentityProvider.token={self.token}", f"--ServerApp.root_dir={self.root}",
                "--LabApp.expose_app_in_browser=True", "--GpuMagicsServer.interval=0.25", "--allow-root",
                *self.extra_args,
            ],
            env=self.env, stdout=self._log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        deadline = time.monotonic() + 90
        while True:
            try:
                with urllib.request.urlopen(f"{self.url}api/status?token={self.token}", timeout=2):
                    return
            except OSError:
                if self._process.poll() is not None or time.monotonic() > deadline:
                    self._log.flush()
                    raise RuntimeError(f"JupyterLab did not start:\n{self.log_path.read_text()}") from None
                time.sleep(0.5)

    def stop(self) -> None:
        process, self._process = self._process, None
        if process is None:
            return
        process.terminate()
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    def restart(self) -> None:
        self.stop()
        self.start()

    def close(self) -> None:
        self.stop()
        self._log.close()
        artifacts = REPO / "test-artifacts"
        artifacts.mkdir(exist_ok=True)
        shutil.copy(self.log_path, artifacts / "lab.log")


@pytest.fixture
def lab(tmp_path: Path, requirements: None) -> Iterator[Lab]:
    server = Lab(tmp_path)
    try:
        server.start()
        yield server
    finally:
        server.close()


def run_notebook_script(lab: Lab, script: str, notebook: str) -> subprocess.CompletedProcess[str]:
    """Copy ``tests/notebooks/NOTEBOOK`` into the lab and run ``node SCRIPT`` on it (screenshots go to
    ``test-artifacts/browser``); its output is printed, and a failure shows it."""
    shutil.copy(REPO / "tests" / "notebooks" / notebook, lab.root / notebook)
    return run_browser_script(lab, script, notebook)


def run_browser_script(
    lab: Lab, script: str, *arguments: str, timeout: float = 540
) -> subprocess.CompletedProcess[str]:
    """``node SCRIPT URL TOKEN ARGUMENTS...`` against the lab (screenshots go to ``test-artifacts/browser``); its
    output is printed, and a failure shows it."""
    result = subprocess.run(
        ["node", str(HERE / script), lab.url, lab.token, *arguments],
        env={**os.environ, "ARTIFACTS": str(REPO / "test-artifacts" / "browser")},
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    print(result.stdout)
    assert result.returncode == 0, result.stdout + result.stderr
    return result
