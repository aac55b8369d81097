"""A hardened server (``allow_unauthenticated_access=False``): every endpoint is decorated, so loading the
extension warns of nothing, and it still answers: 200 with the token, 403 without."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
import warnings
from pathlib import Path
from typing import Any

import pytest
from tornado.httpclient import HTTPClientError
from tornado.websocket import websocket_connect

from gpu_magics.server import _load_jupyter_server_extension
from gpu_magics.server.routes import ROUTES
from tests.free_ports import free_port

START_TIMEOUT = 60.0  # seconds for the subprocess server to answer


@pytest.fixture  # type: ignore[no-redef]  # overrides conftest's
def jp_server_config(runtime_dir: Path) -> dict[str, Any]:
    return {
        "ServerApp": {"jpserver_extensions": {"gpu_magics": True}, "allow_unauthenticated_access": False},
        "GpuMagicsServer": {"source": "fake", "fake_gpus": 2, "interval": 0.1, "history": 50},
    }


@pytest.mark.parametrize(("path", "handler"), ROUTES)
def test_every_route_is_decorated(jp_serverapp: Any, path: str, handler: type[Any]) -> None:
    """The check jupyter-server runs on extension handlers finds no method without an authentication rule."""
    assert jp_serverapp.web_app._check_handler_auth(path, handler) == []


async def test_loading_the_extension_emits_no_runtime_warning(jp_serverapp: Any, jp_fetch: Any) -> None:
    assert jp_serverapp.web_app.settings["allow_unauthenticated_access"] is False
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        _load_jupyter_server_extension(jp_serverapp)  # registers the handlers again: the check runs again
    response = await jp_fetch("gpu-magics", "api", "devices")
    assert response.code == 200


async def test_hardened_server_refuses_anonymous_clients(
    jp_serverapp: Any, http_server_client: Any, jp_base_url: str
) -> None:
    base = f"127.0.0.1:{jp_serverapp.port}{jp_base_url}gpu-magics/api/"
    with pytest.raises(HTTPClientError) as error:
        await http_server_client.fetch(f"{jp_base_url}gpu-magics/api/devices")
    assert error.value.code == 403
    with pytest.raises(HTTPClientError) as error:
        await websocket_connect(f"ws://{base}ws")
    assert error.value.code == 403


def _get(url: str, token: str | None) -> int:
    request = urllib.request.Request(url, headers={"Authorization": f"token {token}"} if token else {})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            code: int = response.status
            return code
    except urllib.error.HTTPError as error:
        return error.code


@pytest.mark.slow
def test_server_with_runtime_warnings_as_errors(tmp_path: Path) -> None:
    """``python -W error::RuntimeWarning -m jupyter_server``, hardened: the extension loads and answers."""
    port, token = free_port(), "hardened-test-token"
    env = {
        **os.environ,
        "JUPYTER_RUNTIME_DIR": str(tmp_path / "runtime"),
        "JUPYTER_DATA_DIR": str(tmp_path / "data"),
        "GPU_MAGICS_RUNTIME_DIR": str(tmp_path / "gpu-magics"),
    }
    env.pop("GPU_MAGICS_SOURCE", None)
    log = tmp_path / "server.log"
    command = [
        sys.executable,
        "-W",
        "error::RuntimeWarning",
        "-m",
        "jupyter_server",
        "--ServerApp.allow_unauthenticated_access=False",
        f"--ServerApp.port={port}",
        "--ServerApp.port_retries=0",
        "--ServerApp.ip=127.0.0.1",
        "--ServerApp.open_browser=False",
        "--ServerApp.allow_root=True",
        f"--ServerApp.root_dir={tmp_path}",
        f"--IdentityProvider.token={token}",
        "--GpuMagicsServer.source=fake",
        "--GpuMagicsServer.fake_gpus=1",
    ]
    with log.open("w") as output:
        server = subprocess.Popen(command, env=env, stdout=output, stderr=subprocess.STDOUT)
    try:
        base = f"http://127.0.0.1:{port}/"
        deadline = time.monotonic() + START_TIMEOUT
        while _get_or_none(f"{base}api/status", token) != 200:
            assert server.poll() is None, f"the server exited:\n{log.read_text()}"
            assert time.monotonic() < deadline, f"the server did not start in {START_TIMEOUT} s:\n{log.read_text()}"
            time.sleep(0.2)
        assert _get(f"{base}gpu-magics/api/devices", token) == 200, log.read_text()
        assert _get(f"{base}gpu-magics/api/devices", None) == 403
    finally:
        server.terminate()
        try:
            server.wait(timeout=15)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait(timeout=15)
    text = log.read_text()
    assert "gpu_magics | extension failed" not in text, text
    assert "gpu_magics | extension was successfully loaded" in text, text


def _get_or_none(url: str, token: str) -> int | None:
    try:
        return _get(url, token)
    except OSError:  # not listening yet
        return None
