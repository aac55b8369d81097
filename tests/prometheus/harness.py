"""Processes for the ``/metrics`` tests, each on loopback and ended by its pid: a Prometheus with a scrape config, a
jupyter-server with the extension on simulated GPUs, and a stand-in for dcgm-exporter (a thread serving
``DCGM_FI_DEV_*`` series as dcgm-exporter labels them)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterable, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from tests.display_recording import CellOutput
from tests.free_ports import free_port

REPO = Path(__file__).resolve().parents[2]
REQUIRE_ENV = "GPU_MAGICS_REQUIRE_BROWSER"  # CI: a test that cannot run for want of a program fails


def require_prometheus() -> tuple[str, str]:
    """The paths of ``prometheus`` and ``promtool``; skips (fails in CI) where they are not installed."""
    found = shutil.which("prometheus"), shutil.which("promtool")
    if found[0] is None or found[1] is None:
        reason = "Prometheus is not installed (bash tests/prometheus/setup.sh installs Debian's package)"
        if os.environ.get(REQUIRE_ENV) == "1":
            pytest.fail(reason)
        pytest.skip(reason)
    return found[0], found[1]


def _stop(process: subprocess.Popen[bytes] | None) -> None:
    if process is None or process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(20)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(10)


def _wait(ready: Callable[[], bool], process: subprocess.Popen[bytes], log: Path, what: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not ready():
        if process.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"{what} did not start:\n{log.read_text(errors='replace')[-5000:]}")
        time.sleep(0.2)


def _answers(url: str, headers: Mapping[str, str] | None = None) -> bool:
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=dict(headers or {})), timeout=2):
            return True
    except (OSError, urllib.error.HTTPError):
        return False


class Prometheus:
    """``prometheus`` with ``scrape_configs``, its data in ``directory``, its API on a free loopback port."""

    def __init__(self, binary: str, directory: Path, scrape_configs: list[dict[str, Any]]) -> None:
        self.binary, self.directory = binary, directory
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.config = directory / "prometheus.yml"  # JSON is YAML
        self.config.write_text(json.dumps({"global": {"scrape_interval": "1s", "scrape_timeout": "1s",
                                                      "evaluation_interval": "1s"},
                                           "scrape_configs": scrape_configs}))  # fmt: skip
        self.log = directory / "prometheus.log"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(
                [self.binary, f"--config.file={self.config}", f"--storage.tsdb.path={self.directory / 'data'}",
                 f"--web.listen-address=127.0.0.1:{self.port}", "--storage.tsdb.retention.time=1h",
                 "--query.lookback-delta=5s"],
                stdout=log, stderr=subprocess.STDOUT, cwd=self.directory,
            )  # fmt: skip
        _wait(lambda: _answers(f"{self.url}/-/ready"), self.process, self.log, "Prometheus", 60)

    def stop(self) -> None:
        _stop(self.process)

    def api(self, path: str, **params: str) -> Any:
        url = f"{self.url}/api/v1/{path}?{urllib.parse.urlencode(params)}"
        with urllib.request.urlopen(url, timeout=10) as response:
            reply = json.loads(response.read())
        assert reply["status"] == "success", reply
        return reply["data"]

    def query(self, expression: str) -> list[dict[str, Any]]:
        """The instant vector ``expression`` gives now: ``[{"metric": {...}, "value": [t, "v"]}, ...]``."""
        data = self.api("query", query=expression)
        assert data["resultType"] == "vector", data
        result: list[dict[str, Any]] = data["result"]
        return result

    def wait_for(self, expression: str, done: Callable[[list[dict[str, Any]]], Any], timeout: float = 60) -> Any:
        """The first result of ``expression`` that ``done`` accepts (queried every 0.5 s)."""
        deadline = time.monotonic() + timeout
        result: list[dict[str, Any]] = []
        while time.monotonic() < deadline:
            result = self.query(expression)
            if done(result):
                return result
            time.sleep(0.5)
        targets = json.dumps(self.api("targets")["activeTargets"])[:3000]
        raise AssertionError(f"{expression} never gave what was waited for; last: {result}; targets: {targets}")

    def target(self, job: str) -> dict[str, Any]:
        (found,) = [t for t in self.api("targets")["activeTargets"] if t["labels"]["job"] == job]
        return dict(found)


class DcgmStandin:
    """Serves ``/metrics`` as dcgm-exporter does for ``gpus`` (``(index, UUID, model, MiB used)``), from a thread."""

    def __init__(self, gpus: Iterable[tuple[int, str, str, int]], hostname: str) -> None:
        lines = ["# HELP DCGM_FI_DEV_FB_USED Framebuffer memory used (in MiB).", "# TYPE DCGM_FI_DEV_FB_USED gauge"]
        for index, uuid, model, used in gpus:
            lines.append(f'DCGM_FI_DEV_FB_USED{{gpu="{index}",UUID="{uuid}",pci_bus_id="00000000:{index + 1:02X}:00.0",'
                         f'device="nvidia{index}",modelName="{model}",Hostname="{hostname}"}} {used}')  # fmt: skip
        body = ("\n".join(lines) + "\n").encode()

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.address = f"127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(10)


class JupyterServer:
    """``python -m jupyter_server`` with the extension, a known token, on a free loopback port."""

    def __init__(self, directory: Path, env: Mapping[str, str], *options: str) -> None:
        self.directory = directory
        self.root = directory / "root"
        self.root.mkdir()
        self.runtime = directory / "jupyter-runtime"
        self.token = os.urandom(16).hex()
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.url = f"http://{self.address}/"
        self.log = directory / "server.log"
        self.env = {**os.environ, **env, "JUPYTER_RUNTIME_DIR": str(self.runtime), "JUPYTER_CONFIG_DIR":
                    str(directory / "config"), "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO),
                    os.environ.get("PYTHONPATH")]))}  # fmt: skip
        self.options = options
        (directory / "config").mkdir()
        (directory / "config" / "jupyter_server_config.json").write_text(
            json.dumps({"ServerApp": {"jpserver_extensions": {"gpu_magics": True}}})
        )
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "jupyter_server", "--no-browser", "--ServerApp.ip=127.0.0.1",
                 f"--ServerApp.port={self.port}", "--ServerApp.port_retries=0",
                 f"--IdentityProvider.token={self.token}", f"--ServerApp.root_dir={self.root}",
                 "--allow-root", *self.options],
                env=self.env, stdout=log, stderr=subprocess.STDOUT,
            )  # fmt: skip
        headers = {"Authorization": f"token {self.token}"}
        _wait(lambda: _answers(f"{self.url}api/status", headers), self.process, self.log, "jupyter-server", 90)

    def stop(self) -> None:
        _stop(self.process)

    def api(self, method: str, path: str, body: Any = None, token: str | None = None) -> Any:
        request = urllib.request.Request(
            f"{self.url}{path}",
            method=method,
            data=None if body is None else json.dumps(body).encode(),
            headers={"Authorization": f"token {token or self.token}", "Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=60) as response:
            text = response.read()
            kind = response.headers.get("Content-Type", "")
        return json.loads(text) if text and kind.startswith("application/json") else text.decode()

    def delete_kernel(self, kernel_id: str) -> None:
        """Shut a kernel down; one already gone (killed by the test, let go by the server) answers 404: fine."""
        try:
            self.api("DELETE", f"api/kernels/{kernel_id}")
        except urllib.error.HTTPError as error:
            if error.code != 404:
                raise


class ServerKernel:
    """A kernel the server started, and a client on its connection file."""

    def __init__(self, server: JupyterServer) -> None:
        from jupyter_client.blocking.client import BlockingKernelClient

        self.server = server
        self.id = str(server.api("POST", "api/kernels", {"name": "python3"})["id"])
        self.client = BlockingKernelClient(connection_file=str(server.runtime / f"kernel-{self.id}.json"))
        self.client.load_connection_file()
        self.client.start_channels(hb=False)  # a heartbeat not yet beaten would count as a dead kernel
        self.client.wait_for_ready(timeout=90)

    def run(self, code: str, timeout: float = 120) -> str:
        """Run a cell; returns what it printed or showed (a failure fails the test); an output updated in place
        as it was left (its last frame)."""
        msg_id = self.client.execute(code)
        output = CellOutput()
        deadline = time.monotonic() + timeout
        while True:
            message = self.client.get_iopub_msg(timeout=max(0.1, deadline - time.monotonic()))
            if message["parent_header"].get("msg_id") != msg_id:
                continue
            kind, content = message["msg_type"], message["content"]
            if kind == "error":
                raise AssertionError("\n".join(content["traceback"]))
            if kind == "status" and content["execution_state"] == "idle":
                return output.text
            output.take(message)

    def running(self) -> bool:
        return any(k["id"] == self.id for k in self.server.api("GET", "api/kernels"))

    def stop(self) -> None:
        """End the client and the kernel (one the test stopped already is fine)."""
        self.client.stop_channels()
        self.server.delete_kernel(self.id)
