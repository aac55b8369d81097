"""A real Dask Gateway for the tests: ``dask-gateway-server`` in its own process on loopback, with simple
(password) auth, started and stopped by ``gateway_server``. Its backend runs each cluster's scheduler and workers
inside the gateway's process (``InProcessBackend``: fast, and they go when it goes), or as processes of their own
(``UnsafeLocalBackend``: a worker command such as ``dask cuda worker``, one GPU each). Both start ``dask
scheduler``/``dask worker``: dask-gateway-server still defaults to ``dask-scheduler``/``dask-worker``, scripts that
distributed 2026.6 removed. The clusters offer a few options, as a hub's gateway does."""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from tests.free_ports import free_port

REPO = Path(__file__).resolve().parents[1]
USER = "alice"
PASSWORD = "wonderland"

CONFIG = """
import json
from dask_gateway_server.backends.inprocess import InProcessBackend
from dask_gateway_server.backends.local import UnsafeLocalBackend
from dask_gateway_server.options import Bool, Float, Integer, Mapping, Options, Select

settings = json.loads({settings!r})


class LoopbackLocalBackend(UnsafeLocalBackend):
    default_host = "127.0.0.1"  # its schedulers and workers listen on loopback only


c.DaskGateway.address = settings["api"]
c.Proxy.address = settings["proxy"]
c.Proxy.tcp_address = settings["tcp"]
c.DaskGateway.backend_class = {{"inprocess": InProcessBackend, "local": LoopbackLocalBackend}}[settings["backend"]]
c.DaskGateway.authenticator_class = "dask_gateway_server.auth.SimpleAuthenticator"
c.SimpleAuthenticator.password = settings["password"]
c.DaskGateway.log_level = settings.get("log_level", "WARN")
c.ClusterConfig.scheduler_cmd = [settings["python"], "-m", "dask", "scheduler"]
c.ClusterConfig.worker_cmd = settings["worker_cmd"]
c.ClusterConfig.idle_timeout = 0
c.ClusterConfig.environment = settings["environment"]
c.LocalBackend.inherited_environment = settings["inherited"]
c.DBBackendBase.cluster_heartbeat_period = 2
c.DBBackendBase.worker_start_timeout = settings["worker_start_timeout"]

def handler(options):
    return {{"worker_cores": options.worker_cores, "worker_memory": "%fG" % options.worker_memory,
             "environment": dict(options.environment)}}

c.Backend.cluster_options = Options(
    Integer("worker_cores", 1, min=1, max=4, label="Worker cores"),
    Float("worker_memory", 2, min=0.25, max=64, label="Worker memory (GiB)"),
    Select("profile", ["cpu", "gpu"], default="cpu", label="Profile"),
    Bool("spot", False, label="Spot instances"),
    Mapping("environment", {{}}, label="Environment"),
    handler=handler,
)
"""


@dataclass
class GatewayServer:
    """A running gateway: its address, and the dask config a client needs to use it (``gateway.*``)."""

    address: str
    proxy: str
    process: subprocess.Popen[bytes]
    log: Path
    config: dict[str, object] = field(default_factory=dict)

    def env(self, password: str = PASSWORD) -> dict[str, str]:
        """Environment variables that give a kernel this gateway and user (dask reads ``DASK_*``)."""
        return {
            "DASK_GATEWAY__ADDRESS": self.address,
            "DASK_GATEWAY__PROXY_ADDRESS": self.proxy,
            "DASK_GATEWAY__AUTH__TYPE": "basic",
            "DASK_GATEWAY__AUTH__KWARGS": json.dumps({"username": USER, "password": password}),
        }

    def dask_config(self, password: str = PASSWORD) -> dict[str, object]:
        return {
            "gateway.address": self.address,
            "gateway.proxy-address": self.proxy,
            "gateway.auth.type": "basic",
            "gateway.auth.kwargs": {"username": USER, "password": password},
        }

    def kill(self) -> None:
        """Take the gateway away at once (its in-process clusters with it)."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=10)

    def clusters(self) -> list[dict[str, object]]:
        """The user's clusters as the gateway's API lists them (pending and running)."""
        import base64

        request = urllib.request.Request(f"{self.address}/api/v1/clusters/")
        token = base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
        request.add_header("Authorization", f"Basic {token}")
        with urllib.request.urlopen(request, timeout=5) as answer:
            found = json.loads(answer.read()).values()
        return [{key: report[key] for key in ("name", "status", "options")} for report in found]


@contextlib.contextmanager
def gateway_server(
    directory: Path,
    backend: str = "inprocess",
    worker_cmd: tuple[str, ...] = ("dask", "worker"),
    environment: dict[str, str] | None = None,
    worker_start_timeout: float = 60,
) -> Iterator[GatewayServer]:
    """Start ``dask-gateway-server`` on loopback ports and wait until it answers; stop it (and every cluster it
        runs) afterwards. ``environment`` goes to the gateway's process (in-process workers read it) and to the
        processes of the local backend. ``worker_cmd`` is the worker's module and its first arguments (``dask worker``,
    ``dask cuda worker``), run by this Python."""
    api, proxy = free_port(), free_port()
    environment = dict(environment or {})
    settings = {
        "api": f"127.0.0.1:{free_port()}",
        "proxy": f"127.0.0.1:{api}",
        "tcp": f"127.0.0.1:{proxy}",
        "backend": backend,
        "password": PASSWORD,
        "worker_cmd": [sys.executable, "-m", *worker_cmd],
        "python": sys.executable,
        "environment": environment,
        "inherited": ["PATH", "PYTHONPATH", "HOME", "LANG", "LC_ALL", "CUDA_VISIBLE_DEVICES", *environment],
        "worker_start_timeout": worker_start_timeout,
        "log_level": os.environ.get("GATEWAY_LOG_LEVEL", "WARN"),
    }
    directory.mkdir(parents=True, exist_ok=True)
    config = directory / "dask_gateway_config.py"
    config.write_text(CONFIG.format(settings=json.dumps(settings)))
    log = directory / "gateway.log"
    env = {**os.environ, **environment, "DASK_GATEWAY_SERVER__PROXY_TOKEN": secrets.token_hex(32)}
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "dask_gateway_server", "-f", str(config)],
            cwd=directory,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    server = GatewayServer(
        address=f"http://127.0.0.1:{api}", proxy=f"gateway://127.0.0.1:{proxy}", process=process, log=log
    )
    try:
        _wait_until_up(server)
        yield server
    finally:
        _stop(server)


def gateway_without_workers(directory: Path) -> contextlib.AbstractContextManager[GatewayServer]:
    """A gateway whose workers never start (their command sleeps, as a worker on a node that never comes up
    would): local-process backend."""
    return gateway_server(
        directory, backend="local", worker_cmd=("tests.sleeping_worker",), environment={"PYTHONPATH": str(REPO)}
    )


def _wait_until_up(server: GatewayServer, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            raise RuntimeError(f"dask-gateway-server exited: {server.log.read_text()[-2000:]}")
        with contextlib.suppress(OSError), urllib.request.urlopen(f"{server.address}/api/health", timeout=2) as answer:
            if answer.status == 200:
                return
        time.sleep(0.2)
    raise RuntimeError(f"dask-gateway-server did not answer within {timeout} s: {server.log.read_text()[-2000:]}")


def _stop(server: GatewayServer) -> None:
    """SIGINT first (it stops its clusters), then the whole process group."""
    if server.process.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(server.process.pid, signal.SIGINT)
        with contextlib.suppress(subprocess.TimeoutExpired):
            server.process.wait(timeout=20)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(server.process.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        server.process.wait(timeout=10)
