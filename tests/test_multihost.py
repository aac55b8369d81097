"""Past one machine: a cluster started with Dask's CLI, two "hosts" (127.0.0.2 and 127.0.0.3) with two
simulated GPUs each, attached from a real IPython shell that has no GPU of its own.

What a user relies on: every GPU is found by asking the workers; status, the cell's monitor figures and the
discovery record name them by host; a worker that dies drops out quickly without an error in the kernel; bad
addresses and unreadable GPUs give one-line answers.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dask
import pytest
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output

from gpu_magics import gpus
from gpu_magics.cluster.control import answers, queries
from gpu_magics.cluster.control.verbs import stop
from gpu_magics.cluster.records.record import list_records
from tests.cli_cluster import CliCluster, cli_cluster
from tests.waiting import wait_for

pytestmark = pytest.mark.slow

DATA = Path(__file__).parent / "data"
SPEC = str(DATA / "worker_gpus.json")
HOST_A, HOST_B = "127.0.0.2", "127.0.0.3"
LABELS = {f"{host} · GPU {index}" for host in (HOST_A, HOST_B) for index in (0, 1)}


@pytest.fixture(scope="module")
def remote(tmp_path_factory: pytest.TempPathFactory) -> Iterator[CliCluster]:
    workers = {
        "node-a": (HOST_A, {"GPU_MAGICS_SOURCE": f"fake:{SPEC}"}),
        "node-b": (HOST_B, {"GPU_MAGICS_SOURCE": f"fake:{SPEC}"}),
    }
    with cli_cluster(workers, tmp_path_factory.mktemp("cli-cluster")) as started:
        yield started


@pytest.fixture
def no_local_gpu(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Path]:
    """The kernel's own source has no GPU; records go to a fresh runtime dir (returned)."""
    monkeypatch.setenv("GPU_MAGICS_SOURCE", "fake:0")
    runtime = tmp_path / "runtime"
    monkeypatch.setenv("GPU_MAGICS_RUNTIME_DIR", str(runtime))
    previous = gpus.set_inventory(None)
    try:
        yield runtime
    finally:
        gpus.set_inventory(previous)


@pytest.fixture
def attached(ip: InteractiveShell, remote: CliCluster, no_local_gpu: Path) -> Iterator[Path]:
    stop.stop()
    with capture_output():
        ip.run_line_magic("gpucluster", f"--address {remote.address} --name remote")
    telemetry = queries.telemetry()
    assert telemetry is not None
    wait_for(lambda: len(telemetry.gpus()) == 4, what="4 GPUs reported")
    try:
        yield no_local_gpu
    finally:
        stop.stop()


def test_a_scheduler_without_a_dashboard_gets_no_made_up_link(ip: InteractiveShell, attached: Path) -> None:
    """``dask scheduler --no-dashboard``: no ``:8787`` link anywhere, and ``%gpucluster dashboard`` says why."""
    assert answers.status().dashboard_url is None
    with capture_output() as said:
        ip.run_line_magic("gpucluster", "status")
    assert "dashboard: off" in said.stdout + "".join(o.data.get("text/plain", "") for o in said.outputs)
    assert ":8787" not in said.stdout
    with capture_output() as said:
        ip.run_line_magic("gpucluster", "dashboard")
    assert said.stdout.startswith("%gpucluster: the cluster has no dashboard")
    current = queries.active()
    assert current is not None and current.record is not None and current.record.dashboard_url is None


def test_every_gpu_of_both_hosts_is_found_by_asking_the_workers(ip: InteractiveShell, attached: Path) -> None:
    assert queries.has_gpu_workers()
    info = answers.status()
    assert info.hardware == "4x NVIDIA H200 on 2 hosts (2 workers, attached)"
    by_worker = {worker.name: worker for worker in info.workers}
    assert {by_worker["node-a"].host, by_worker["node-b"].host} == {HOST_A, HOST_B}
    assert {gpu.label for worker in info.workers for gpu in worker.gpus} == LABELS

    def held() -> dict[str, int | None]:  # processes are read every few seconds (the slow fields)
        return {gpu.label: gpu.process_memory for worker in answers.status().workers for gpu in worker.gpus}

    # the spec's process "self": the worker itself (on a busy machine a worker's report can be late, and its GPUs
    # then leave the status until the next one: wait for the figure, not a moment)
    wait_for(lambda: held().get(f"{HOST_A} · GPU 0") == 3 * 2**30, what="the worker's own memory")
    with capture_output() as shown:
        ip.run_line_magic("gpucluster", "status")
    text = "".join(output.data.get("text/plain", "") for output in shown.outputs)
    markup = "".join(output.data.get("text/html", "") for output in shown.outputs)
    for host in (HOST_A, HOST_B):  # each host named once, its GPUs beneath it
        assert host in text and host in markup
    assert text.count("GPU 0 · NVIDIA H200") == 2 and text.count("GPU 1 · NVIDIA H200") == 2


def test_a_multi_gpu_cell_shows_the_cluster_gpus_and_no_local_one(ip: InteractiveShell, attached: Path) -> None:
    with capture_output():
        ip.run_cell_magic("gpurun", "multi-gpu -q -o t_remote", "import time\ntime.sleep(2.5)\n")
    result = ip.user_ns["t_remote"]
    assert not result.failed
    figures = result.monitor
    assert figures.readings == "gpu"
    assert {gpu.label for gpu in figures.gpus} == LABELS
    assert all(gpu.samples >= 1 for gpu in figures.gpus)
    assert "on 2 hosts" in result.hardware


def test_the_record_lists_members_with_their_gpus(attached: Path) -> None:
    def complete(record: Any) -> bool:
        return len(record.members) == 2 and all(m["gpus"][0]["process_memory"] for m in record.members)

    record = wait_for(
        lambda: next((r for r in list_records(clean=False) if complete(r)), None), what="members in the record"
    )
    assert (attached.stat().st_mode & 0o077) == 0
    for path in attached.glob("*.json"):
        assert (path.stat().st_mode & 0o777) == 0o600
    members = {member["name"]: member for member in record.members}
    assert set(members) == {"node-a", "node-b"}
    assert {member["host_label"] for member in members.values()} == {HOST_A, HOST_B}
    labels = {gpu["label"] for member in members.values() for gpu in member["gpus"]}
    assert labels == LABELS
    gpu0 = next(gpu for gpu in members["node-a"]["gpus"] if gpu["label"].endswith("GPU 0"))
    assert gpu0["process_memory"] == 3 * 2**30 and gpu0["process_memory_source"] == "nvml"
    json.dumps(record.to_json())  # the server sends it as it is


def test_a_killed_worker_drops_out_a_new_one_joins_and_nothing_raises(
    ip: InteractiveShell, no_local_gpu: Path, tmp_path: Path
) -> None:
    workers = {name: (host, {"GPU_MAGICS_SOURCE": f"fake:{SPEC}"}) for name, host in (("a", HOST_A), ("b", HOST_B))}
    with cli_cluster(workers, tmp_path / "logs") as doomed:
        stop.stop()
        with capture_output():
            ip.run_line_magic("gpucluster", f"--address {doomed.address}")
        try:
            telemetry = queries.telemetry()
            assert telemetry is not None
            wait_for(lambda: len(telemetry.gpus()) == 4, what="4 GPUs")
            doomed.kill_worker("b")
            # gone once its reports are stale (a few report intervals: seconds); 120 s bounds only a host never dropped
            wait_for(lambda: {g.host for g in telemetry.gpus()} == {HOST_A}, timeout=120, what="host B gone")
            info = answers.status()
            assert [worker.name for worker in info.workers] == ["a"] or all(
                not worker.gpus for worker in info.workers if worker.name == "b"
            )
            doomed.add_worker("c", "127.0.0.4", {"GPU_MAGICS_SOURCE": f"fake:{SPEC}"})  # joins later
            wait_for(lambda: "127.0.0.4" in {g.host for g in telemetry.gpus()}, timeout=30, what="the new worker")
            assert queries.has_gpu_workers() and len(telemetry.gpus()) == 4
            with capture_output():
                ip.run_cell_magic("gpurun", "multi-gpu -q -o t_after", "1 + 1\n")
            assert not ip.user_ns["t_after"].failed
        finally:
            stop.stop()


def test_an_unreadable_gpu_is_marked_not_raised(ip: InteractiveShell, no_local_gpu: Path, tmp_path: Path) -> None:
    spec = json.loads(Path(SPEC).read_text())
    spec["gpus"][1]["handle_error"] = "NoPermission"
    broken = tmp_path / "broken.json"
    broken.write_text(json.dumps(spec))
    with cli_cluster({"odd": (HOST_A, {"GPU_MAGICS_SOURCE": f"fake:{broken}"})}, tmp_path / "logs") as odd:
        stop.stop()
        with capture_output():
            ip.run_line_magic("gpucluster", f"--address {odd.address}")
        try:
            telemetry = queries.telemetry()
            assert telemetry is not None
            gpus_seen = wait_for(lambda: telemetry.gpus() if len(telemetry.gpus()) == 2 else None, what="2 GPUs")
            errors = {gpu.label: gpu.gpu.error for gpu in gpus_seen}
            host = socket.gethostname()  # one address per hostname: named by its hostname
            assert errors[f"{host} · GPU 0"] is None
            assert "Insufficient Permissions" in (errors[f"{host} · GPU 1"] or "")
            info = answers.status()
            assert any(gpu.error for worker in info.workers for gpu in worker.gpus)
        finally:
            stop.stop()


def test_an_address_that_is_not_a_scheduler_is_one_line(ip: InteractiveShell, no_local_gpu: Path) -> None:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    port = listener.getsockname()[1]

    def answer_garbage() -> None:
        with contextlib_suppress():
            while True:
                connection, _ = listener.accept()
                connection.sendall(b"HTTP/1.1 400 Bad Request\r\n\r\n")
                connection.close()

    threading.Thread(target=answer_garbage, daemon=True).start()
    stop.stop()
    try:
        began = time.monotonic()
        with pytest.raises(UsageError) as raised, dask.config.set({"distributed.comm.timeouts.connect": "600s"}):
            ip.run_line_magic("gpucluster", f"--address tcp://127.0.0.1:{port} --timeout 3")
        # within seconds of --timeout, not distributed's connect timeout (600 s here) nor never: far from both
        assert time.monotonic() - began < 120
        message = str(raised.value)
        assert "\n" not in message and f"127.0.0.1:{port}" in message
        assert queries.active() is None
    finally:
        listener.close()


def contextlib_suppress() -> Any:
    import contextlib

    return contextlib.suppress(OSError)


def test_a_scheduler_that_goes_away_mid_cell_fails_the_cell_in_one_line(
    ip: InteractiveShell, no_local_gpu: Path, tmp_path: Path
) -> None:
    with cli_cluster({"w": (HOST_A, {"GPU_MAGICS_SOURCE": f"fake:{SPEC}"})}, tmp_path / "logs") as leaving:
        stop.stop()
        with capture_output():
            ip.run_line_magic("gpucluster", f"--address {leaving.address}")
        try:
            client = queries.require_client()

            def end_once_running() -> None:  # the scheduler goes away while the cell's task runs
                wait_for(lambda: any(client.processing().values()), 120, "the cell's task running")
                _end_scheduler(leaving)

            killer = threading.Thread(target=end_once_running, daemon=True)
            killer.start()
            cell = "import time\nfrom distributed import get_client\nget_client().submit(time.sleep, 300).result()\n"
            began = time.monotonic()
            with capture_output() as shown:
                ip.run_cell_magic("gpurun", "multi-gpu -q", cell)
            assert time.monotonic() - began < 150  # ended by the scheduler's end, not the task's 300 s
            killer.join(30)
            text = shown.stdout + shown.stderr + "".join(o.data.get("text/plain", "") for o in shown.outputs)
            assert "went away" in text and "Traceback" not in text
            with pytest.raises(UsageError) as raised:
                ip.run_cell_magic("gpurun", "multi-gpu -q", "1 + 1\n")
            assert "\n" not in str(raised.value)
        finally:
            stop.stop()


def _end_scheduler(cli: CliCluster) -> None:
    import os
    import signal

    os.killpg(cli.scheduler.pid, signal.SIGKILL)


def test_gpumonitor_shows_the_clusters_gpus_when_this_machine_has_none(ip: InteractiveShell, attached: Path) -> None:
    kernel = object()
    ip.kernel = kernel  # type: ignore[attr-defined]  # as in a kernel: panels redraw in place
    try:
        with capture_output() as shown:
            ip.run_line_magic("gpumonitor", "")
            time.sleep(1.5)
            ip.run_line_magic("gpumonitor", "--stop")
    finally:
        del ip.kernel  # type: ignore[attr-defined]
    text = "".join(output.data.get("text/plain", "") for output in shown.outputs)
    assert "cluster 'remote' · 4 GPUs on 2 hosts" in text
    for label in LABELS:
        assert label in text


def test_a_mixed_clusters_cell_runs_on_its_gpu_workers_and_says_so(
    ip: InteractiveShell, no_local_gpu: Path, tmp_path: Path
) -> None:
    workers = {
        "with-gpus": (HOST_A, {"GPU_MAGICS_SOURCE": f"fake:{SPEC}"}),
        "cpu-only": (HOST_B, {"GPU_MAGICS_SOURCE": "fake:0"}),
    }
    with cli_cluster(workers, tmp_path / "logs") as mixed:
        stop.stop()
        with capture_output():
            ip.run_line_magic("gpucluster", f"--address {mixed.address}")
        try:
            with_gpu, without_gpu = queries.split_workers_by_gpu()
            assert len(with_gpu) == 1 and len(without_gpu) == 1
            cell = (
                "import dask\nfrom distributed import get_worker\n"
                "t_where = set(dask.compute(*[dask.delayed(lambda i: get_worker().name)(i) for i in range(24)]))\n"
            )
            with capture_output():
                ip.run_cell_magic("gpurun", "multi-gpu -q -o t_mixed", cell)
            assert ip.user_ns["t_where"] == {"with-gpus"}
            (note,) = [n for n in ip.user_ns["t_mixed"].notes if "mixes" in n]
            assert "1 GPU worker and 1 without a GPU" in note and "\n" not in note
        finally:
            stop.stop()


def test_a_scheduler_with_a_dashboard_keeps_its_link(ip: InteractiveShell, no_local_gpu: Path, tmp_path: Path) -> None:
    """The check drops only a dashboard that is not there: one started with the scheduler is shown and answers."""
    import urllib.request

    stop.stop()
    with cli_cluster({"solo": (HOST_A, {})}, tmp_path / "logs", dashboard=True) as started:
        try:
            with capture_output():
                ip.run_line_magic("gpucluster", f"--address {started.address} --name with-dashboard")
            link = answers.status().dashboard_url
            assert link is not None and link.endswith("/status")
            with urllib.request.urlopen(link, timeout=10) as page:
                assert page.status == 200
        finally:
            stop.stop()
