"""``%gpucluster --gateway`` against a real Dask Gateway (``dask-gateway-server`` in its own process on loopback,
simple password auth; ``tests/gateway_server.py``), driven by a real IPython shell: start with the gateway's
options, a cell, scale and adapt, list and reconnect, stop and ``stop --keep``, the GPU-less kernel on workers that
report GPUs, and every way it can go wrong (a gateway that does not answer, refuses the user or lacks an option, a
worker that never comes, the gateway going away mid-cell), each one line with nothing left running on the
gateway. The kernel's shutdown is in ``test_gateway_kernel.py``."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output

from gpu_magics import gpus
from gpu_magics.cluster.control import answers, queries
from gpu_magics.cluster.control.verbs import stop
from gpu_magics.cluster.managers.gateway import service
from gpu_magics.cluster.options import gateway_short_name
from gpu_magics.gpurun.graphs import device
from tests.free_ports import free_port
from tests.gateway_server import PASSWORD, GatewayServer, gateway_server, gateway_without_workers
from tests.waiting import wait_for

pytest.importorskip("dask_gateway_server", reason="needs dask-gateway-server (the test extra)")
pytest.importorskip("dask_gateway")  # first: its import adds its defaults to dask's config, which a config.set undoes
pytestmark = pytest.mark.slow  # a gateway server, its schedulers and workers

ROOT = Path(__file__).resolve().parents[1]
SPEC = str(ROOT / "tests" / "data" / "worker_gpus.json")
WORKER_ENV = {  # the gateway's in-process workers report GPUs and make their chunks on the stand-in device
    "GPU_MAGICS_SOURCE": f"fake:{SPEC}",
    device.LIBRARY_VARIABLE: "tests.device_standin",
    "PYTHONPATH": str(ROOT),
}
SEED = (
    "t_x = da.random.RandomState(42).normal(10, 1, size=(2000, 2000), chunks=500)\n"
    "t_value = (t_x + 1)[::2, ::2].mean().compute()\n"
)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayServer]:
    with gateway_server(tmp_path_factory.mktemp("gateway"), environment=WORKER_ENV) as started:
        yield started


@pytest.fixture
def shell(
    ip: InteractiveShell, server: GatewayServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> Iterator[InteractiveShell]:
    """The shell with the gateway in dask's config (as a hub sets it), a kernel that sees no GPU."""
    for key, value in server.env().items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("GPU_MAGICS_SOURCE", "fake:0")
    monkeypatch.setenv("GPU_MAGICS_RUNTIME_DIR", str(tmp_path / "runtime"))
    import dask

    previous = gpus.set_inventory(None)
    stop.stop()
    with dask.config.set(server.dask_config()):
        try:
            yield ip
        finally:
            with capture_output():
                stop.stop()
            gpus.set_inventory(previous)
            for report in server.clusters():  # a test that failed half-way: leave the gateway empty for the next
                _shut_down(server, str(report["name"]))


def _shut_down(server: GatewayServer, name: str) -> None:
    from dask_gateway import Gateway

    gateway = Gateway(server.address)
    try:
        gateway.stop_cluster(name)
    finally:
        service.close_gateway(gateway)


def magic(ip: InteractiveShell, line: str) -> str:
    """What ``%gpucluster line`` printed and showed (as text)."""
    with capture_output() as shown:
        ip.run_line_magic("gpucluster", line)
    return shown.stdout + "".join(output.data.get("text/plain", "") for output in shown.outputs)


def refused(ip: InteractiveShell, line: str) -> str:
    """The one line a bad ``%gpucluster`` line answers."""
    with pytest.raises(UsageError) as raised, capture_output():
        ip.run_line_magic("gpucluster", line)
    message = str(raised.value)
    assert "\n" not in message and "Traceback" not in message, message
    return message


def test_a_gateway_cluster_starts_with_the_gateways_options_runs_a_cell_scales_and_stops(
    shell: InteractiveShell, server: GatewayServer
) -> None:
    magic(
        shell,
        "--gateway --workers 2 --gateway-option worker_cores=2 --gateway-option worker_memory=1.5 "
        """--gateway-option spot=yes --gateway-option 'environment={"A": "1"}' --name gw""",
    )
    queries.require_client().wait_for_workers(2, timeout=120)  # the start returns as the scheduler answers
    info = answers.status()
    assert info.kind == "gateway" and len(info.workers) == 2
    assert all(worker.threads == 2 for worker in info.workers)  # the option reached the gateway's workers
    (report,) = server.clusters()
    assert report["status"] == "RUNNING"
    assert report["options"] == {
        "worker_cores": 2,
        "worker_memory": 1.5,
        "spot": True,
        "profile": "cpu",
        "environment": {"A": "1"},
    }
    record = queries.active()
    assert record is not None and record.record is not None and record.record.kind == "gateway"
    assert oct(record.record_path.stat().st_mode & 0o777) == "0o600"  # type: ignore[union-attr]

    shell.run_cell("import dask.array as da", store_history=False)
    with capture_output():
        shell.run_cell_magic("gpurun", "multi-gpu -q -o t_run --no-monitor", SEED)
    assert not shell.user_ns["t_run"].failed
    assert shell.user_ns["t_value"] == pytest.approx(11.0, abs=1e-2)

    assert "scaled 'gw' to 1 worker" in magic(shell, "scale 1")
    # the gateway retires the other worker after it answered: the magic says "scaled" once it has left
    assert len(answers.status().workers) == 1
    magic(shell, "adapt 1 3")
    assert answers.status().adaptive == (1, 3)

    said = magic(shell, "stop")
    assert "stopped cluster 'gw'" in said and "shut down" in said
    assert server.clusters() == []


def test_stop_keep_leaves_it_running_and_list_and_connect_come_back_to_it(
    shell: InteractiveShell, server: GatewayServer
) -> None:
    magic(shell, "--gateway --workers 1 --name kept")
    said = magic(shell, "stop --keep")
    (report,) = server.clusters()
    name = str(report["name"])
    assert report["status"] == "RUNNING" and f"--gateway --connect {name}" in said

    listed = magic(shell, "--gateway --list")
    assert name in listed and "running" in listed and "worker_cores=1" in listed

    magic(shell, f"--gateway --connect {name}")
    info = answers.status()
    assert info.kind == "gateway" and len(info.workers) == 1  # it waited for the worker the cluster has
    assert f"{name}" in magic(shell, "--gateway --list").split("(in use here)")[0]
    said = magic(shell, "stop")  # connected, not made here: stop only detaches
    assert "keeps running" in said and "stop --close" in said
    assert [r["status"] for r in server.clusters()] == ["RUNNING"]

    magic(shell, f"--gateway --connect {name} --workers 2")  # --workers scales the cluster it connects to
    assert len(answers.status().workers) == 2
    assert "shut down" in magic(shell, "stop --close")
    assert server.clusters() == []


def test_a_kernel_without_a_gpu_works_on_gateway_workers_that_report_gpus(
    shell: InteractiveShell, server: GatewayServer
) -> None:
    """Array cells, the session backend and the views from a kernel that sees no GPU. The workers report
    (simulated) GPUs but have no CuPy, and say so at their warm-up, so array chunks stay NumPy there; CuPy chunks
    made on gateway GPU workers for such a kernel run in ``tests/gpu/test_gateway_gpu.py``."""
    magic(shell, "--gateway --workers 2")
    info = answers.status()
    # the GPUs come from the workers' own reports (both in-process workers report the gateway process's simulated
    # GPUs, which the view lists once, under one of them)
    assert info.kind == "gateway" and any(worker.gpus for worker in info.workers), info.workers
    current = queries.active()
    assert current is not None and current.record is not None and current.record.workers
    shell.run_cell("import dask.array as da", store_history=False)
    with capture_output():
        shell.run_cell_magic("gpurun", "multi-gpu -q -o t_run --no-monitor", SEED)
    result = shell.user_ns["t_run"]
    assert not result.failed and "the cluster has no GPU worker" in result.notes
    assert type(shell.user_ns["t_value"]).__module__ == "numpy"
    assert shell.user_ns["t_value"] == pytest.approx(11.0, abs=1e-2)
    with capture_output():
        shell.run_line_magic("gpurun", "multi-gpu")  # the session backend: plain cells on the gateway's workers
        shell.run_cell("t_plain = float((da.ones((1000, 1000), chunks=250) * 2).sum().compute())")
        shell.run_line_magic("gpurun", "off")
    assert shell.user_ns["t_plain"] == 2_000_000.0


def test_from_a_gateway_cluster_waits_for_the_workers_it_asked_for(
    shell: InteractiveShell, server: GatewayServer
) -> None:
    from dask_gateway import Gateway

    made = Gateway().new_cluster()
    try:
        made.scale(2)
        shell.user_ns["t_made"] = made
        magic(shell, "--from t_made")
        assert len(answers.status().workers) == 2
        magic(shell, "stop --close")
    finally:
        made.close(shutdown=True)
        service.close_gateway(made.gateway)
    assert server.clusters() == []


def test_an_option_the_gateway_lacks_lists_those_it_offers(shell: InteractiveShell, server: GatewayServer) -> None:
    message = refused(shell, "--gateway --gateway-option worker_gpus=1")
    assert "has no option 'worker_gpus'" in message
    assert "worker_cores (whole number 1-4, now 1)" in message and "profile (one of cpu, gpu" in message
    assert "at most 4 on this gateway, got 9" in refused(shell, "--gateway --gateway-option worker_cores=9")
    assert "choose one of cpu, gpu" in refused(shell, "--gateway --gateway-option profile=tpu")
    assert "expected a whole number" in refused(shell, "--gateway --gateway-option worker_cores=two")
    assert "expected true or false" in refused(shell, "--gateway --gateway-option spot=maybe")
    assert "expected a mapping" in refused(shell, "--gateway --gateway-option environment=A")
    assert server.clusters() == []


def test_a_bad_line_leaves_the_running_cluster_running(shell: InteractiveShell, server: GatewayServer) -> None:
    magic(shell, "--gateway --workers 1 --name first")
    refused(shell, "--gateway --replace --gateway-option nope=1")
    assert "has no option 'nope'" in refused(shell, "--gateway --gateway-option nope=1")  # not "already up"
    current = queries.active()
    assert current is not None and current.name == "first"
    magic(shell, "stop")
    assert server.clusters() == []


def test_a_gateway_that_does_not_answer_or_refuses_the_user_is_one_line(
    shell: InteractiveShell, server: GatewayServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    nobody = f"http://127.0.0.1:{free_port()}"
    assert f"the gateway at {nobody} did not answer" in refused(shell, f"--gateway {nobody}")
    import dask

    with dask.config.set(server.dask_config(password=PASSWORD + "-wrong")):
        message = refused(shell, "--gateway")
    assert "refused you (401" in message and "gateway.auth" in message
    with dask.config.set({"gateway.address": None}):
        monkeypatch.delenv("DASK_GATEWAY__ADDRESS")
        message = refused(shell, "--gateway")
    assert "no gateway address" in message and "--gateway http://HOST:8000" in message
    assert server.clusters() == []


def test_hints_run_as_printed_with_the_address_typed_on_the_line(
    shell: InteractiveShell, server: GatewayServer
) -> None:
    """Where the line named the gateway, every hint that prints a line names it too, and runs as printed."""
    import re

    magic(shell, f"--gateway {server.address} --workers 1 --name typed")
    said = magic(shell, "stop --keep")
    (report,) = server.clusters()
    name = str(report["name"])
    hint = re.search(r"\((%gpucluster --gateway \S+ --connect \S+) comes back to it\)", said)
    assert hint is not None and hint.group(1) == f"%gpucluster --gateway {server.address} --connect {name}", said

    listed = magic(shell, f"--gateway {server.address} --list")
    assert f"%gpucluster --gateway {server.address} --connect {name} connects to the newest" in listed
    options = f"cluster options (%gpucluster --gateway {server.address} --gateway-option KEY=VALUE): worker_cores"
    assert options in listed and "profile (one of cpu, gpu" in listed

    made_at = time.time()
    time.sleep(1.5)  # the connection comes later than the cluster's start: the card tells the cluster's age
    magic(shell, hint.group(1).removeprefix("%gpucluster "))  # the hint, copied
    info = answers.status()
    assert info.kind == "gateway" and len(info.workers) == 1
    short = gateway_short_name(name)
    assert info.name == short and len(short) < len(name)
    assert info.up_since is not None and info.started_at is not None
    assert info.up_since < made_at < info.started_at  # its start on the gateway, not this connection
    shown = magic(shell, "status")
    headline = shown.splitlines()[0]
    assert headline.startswith(f"Cluster '{short}': ") and name not in headline, shown
    assert "started in" not in shown
    record = queries.active()
    assert record is not None and record.record is not None and record.record.up_since == info.up_since
    assert "shut down" in magic(shell, "stop --close")
    assert server.clusters() == []
    empty = magic(shell, f"--gateway {server.address} --list")
    assert f"no clusters of yours on the gateway at {server.address} (%gpucluster --gateway {server.address} " in empty
    assert "cluster options (" in empty


class _NotAGateway:
    """A web server on loopback that is not a Dask Gateway: it answers every request with ``answer``."""

    def __init__(self, status: int, content_type: str, body: bytes) -> None:
        import http.server
        import threading

        answer = (status, content_type, body)

        class Handler(http.server.BaseHTTPRequestHandler):
            def _reply(self) -> None:
                code, kind, data = answer
                self.send_response(code)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_DELETE = _reply

            def log_message(self, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.address = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)


@pytest.mark.parametrize(
    "answer",
    [
        (404, "text/html", b"<!DOCTYPE HTML>\n<html><body>Not Found</body></html>"),  # a web server
        (404, "text/plain", b""),  # nothing to say (dask-gateway read it as a bare "ValueError")
        (200, "text/html", b"<!doctype html><title>JupyterHub</title>"),  # a page
        (200, "application/json", b'{"message": "hello"}'),  # another service's API
    ],
    ids=["html-404", "empty-404", "page", "json"],
)
def test_an_address_that_is_not_a_gateway_is_said_so_in_one_line(
    ip: InteractiveShell, answer: tuple[int, str, bytes]
) -> None:
    other = _NotAGateway(*answer)
    try:
        for line in ("", " --list", " --connect abc"):
            message = refused(ip, f"--gateway {other.address}{line}")
            assert message == (
                f"%gpucluster --gateway: {other.address} did not answer as a Dask Gateway (check the address: on a "
                "hub it is gateway.address in dask's config)"
            ), message
    finally:
        other.close()


def test_a_gateway_address_where_nothing_listens_says_so(ip: InteractiveShell) -> None:
    nobody = f"http://127.0.0.1:{free_port()}"
    assert refused(ip, f"--gateway {nobody}") == (
        f"%gpucluster --gateway: the gateway at {nobody} did not answer (nothing listens there)"
    )


def test_connecting_to_a_cluster_the_gateway_does_not_have_is_one_line(
    shell: InteractiveShell, server: GatewayServer
) -> None:
    message = refused(shell, "--gateway --connect nosuchcluster")
    assert "refused to find 'nosuchcluster'" in message


def test_stop_keep_belongs_to_gateway_clusters(shell: InteractiveShell, server: GatewayServer) -> None:
    magic(shell, "--gateway --workers 1 --name k")
    assert "choose one of --close" in refused(shell, "stop --keep --close")
    magic(shell, "stop")
    magic(shell, "--cpu-workers 1 --name local")
    message = refused(shell, "stop --keep")
    assert "only a gateway cluster outlives its kernel" in message
    assert queries.active() is not None  # nothing was stopped
    magic(shell, "stop")


@pytest.fixture
def never_worker(tmp_path: Path) -> Iterator[GatewayServer]:
    with gateway_without_workers(tmp_path / "never") as started:
        yield started


@contextlib.contextmanager
def using(gateway: GatewayServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    """Within the block, dask's config names ``gateway`` (as a hub's does) and records go to ``tmp_path``."""
    import dask

    monkeypatch.setenv("GPU_MAGICS_RUNTIME_DIR", str(tmp_path / "runtime"))
    with dask.config.set(gateway.dask_config()):
        yield


def test_a_worker_that_never_comes_is_one_line_and_nothing_is_left(
    ip: InteractiveShell, never_worker: GatewayServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from gpu_magics.cluster import options

    monkeypatch.setattr(options, "DEFAULT_WAIT", 600.0)  # a wait that took the default instead of --wait 3: 600 s
    with using(never_worker, monkeypatch, tmp_path):
        began = time.monotonic()
        message = refused(ip, "--gateway --workers 1 --wait 3")
    assert "no worker came within 3 s" in message and "--wait SECONDS" in message
    assert time.monotonic() - began < 300  # --wait's 3 s and the gateway's round trips: far from the default's 600 s
    assert never_worker.clusters() == []
    assert queries.active() is None


@pytest.fixture
def doomed(tmp_path: Path) -> Iterator[GatewayServer]:
    with gateway_server(tmp_path / "doomed") as started:
        yield started


def test_the_gateway_going_away_mid_cell_is_one_line_and_the_kernel_goes_on(
    ip: InteractiveShell, doomed: GatewayServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import threading

    with using(doomed, monkeypatch, tmp_path):
        # --timeout bounds the start and, once up, how long the client tries to reach a scheduler that went away
        # (the cell's one line comes then): 30 s rather than the 120 s default
        magic(ip, "--gateway --workers 1 --timeout 30s")
        ip.run_cell("import dask.array as da, numpy as np, time", store_history=False)
        client = queries.require_client()

        def kill_once_running() -> None:  # the gateway goes away while the cell's tasks run
            wait_for(lambda: any(client.processing().values()), 120, "the cell's tasks running")
            doomed.kill()

        threading.Thread(target=kill_once_running, daemon=True).start()
        slow = "t_y = da.ones((8,), chunks=1).map_blocks(lambda b: (time.sleep(3), b)[1], meta=np.empty(0)).sum()\n"
        with capture_output() as shown:
            ip.run_cell_magic("gpurun", "multi-gpu -o t_run --no-monitor", slow + "t_y.compute()\n")
        result = ip.user_ns["t_run"]
        assert result.failed, shown.stdout
        began = time.monotonic()
        said = magic(ip, "stop")
        assert time.monotonic() - began < 150  # a gateway gone refuses at once: a stop that hangs on it, not load
    assert "the gateway did not answer" in said and "--gateway --list" in said
    assert len(said.strip().splitlines()) == 1, said
    assert queries.active() is None
    assert ip.run_cell("1 + 1").result == 2  # the kernel goes on


def test_the_idle_timeout_shuts_a_gateway_cluster_made_here_down(
    shell: InteractiveShell, server: GatewayServer
) -> None:
    magic(shell, "--gateway --workers 1 --idle-timeout 2s")
    deadline = time.monotonic() + 30
    # the idle watcher's thread lets go of the cluster, closes its client, then shuts it down on the gateway: wait
    # for that last step, so that this test ends with the client closed (and dask's config put back)
    while (queries.active() is not None or server.clusters()) and time.monotonic() < deadline:
        time.sleep(0.25)
    assert queries.active() is None
    assert server.clusters() == []


def test_an_spmd_cell_runs_one_rank_per_gateway_worker(
    ip: InteractiveShell, doomed: GatewayServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """CPU workers this time (the module's gateway gives each worker the same simulated GPUs, which SPMD refuses
    to share between ranks)."""
    pytest.importorskip("torch", reason="needs torch (CPU build) for gloo collectives")
    with using(doomed, monkeypatch, tmp_path):
        magic(ip, "--gateway --workers 2")
        try:
            _spmd_sum(ip)
        finally:
            with capture_output():
                stop.stop()
    assert doomed.clusters() == []


def _spmd_sum(shell: InteractiveShell) -> None:
    body = (
        "import torch, torch.distributed as dist\n"
        "t = torch.ones(1) * (dist.get_rank() + 1)\n"
        "dist.all_reduce(t)\n"
        "float(t)\n"
    )
    with capture_output() as shown:
        shell.run_cell(f"%%gpurun spmd --init torch -q -o t_spmd\n{body}")
    assert "t_spmd" in shell.user_ns, shown.stdout + shown.stderr
    result = shell.user_ns["t_spmd"]
    assert result.values == [3.0, 3.0]  # ranks 0 and 1 on the two workers, summed by gloo
