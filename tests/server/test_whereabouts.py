"""Where a kernel this server does not run belongs (its notebook and server, from its environment and the servers'
``jpserver-<pid>.json``), and whose a process no notebook holds is: real processes, no server."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpu_magics.cluster.records.record import ClusterRecord, KernelRecord
from gpu_magics.server.ownership.owners import GpuHolder
from gpu_magics.server.ownership.whereabouts import places_of, with_users, with_whereabouts

SERVER_PID = 424242  # the pid the "server" wrote its jpserver file under (no process is needed for it)
URL = "http://127.0.0.1:8890/"


@pytest.fixture
def kernel(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[int]:
    """A process standing for another server's kernel: its environment as that server sets it (the notebook
    under the server's root, the server's pid), and that server's jpserver file in the runtime directory."""
    root = tmp_path / "root"
    (root / "work").mkdir(parents=True)
    runtime = tmp_path / "runtime"
    runtime.mkdir()
    (runtime / f"jpserver-{SERVER_PID}.json").write_text(
        json.dumps({"pid": SERVER_PID, "url": URL, "root_dir": str(root), "token": "secret"})
    )
    (runtime / "jpserver-broken.json").write_text("{")  # one being written: skipped
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(runtime))
    env = {**os.environ, "JPY_SESSION_NAME": str(root / "work" / "train.ipynb"), "JPY_PARENT_PID": str(SERVER_PID)}
    process = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE, env=env)
    try:
        yield process.pid
    finally:
        process.kill()
        process.wait(timeout=30)


def _holder(pid: int, role: str, kernel_id: str | None = None, cluster: str | None = None) -> GpuHolder:
    return GpuHolder(pid=pid, gpu=0, gpu_uuid="GPU-0", used_memory=1, kernel_id=kernel_id, path=None,
                     cluster=cluster, role=role, gpu_label="GPU 0")  # fmt: skip


def _record(name: str, pid: int, kernel_id: str | None, host: str | None = None) -> ClusterRecord:
    return ClusterRecord(name=name, scheduler_address="tcp://127.0.0.1:9", dashboard_url=None, kind="cpu",
                         workers=1, pid=pid, kernel_id=kernel_id, host=host)  # fmt: skip


def test_a_cluster_elsewhere_names_its_kernel_s_notebook_and_server(kernel: int) -> None:
    here, far = _record("one", kernel, "k1"), _record("far", kernel, "k2", host="another-host.invalid")
    gone = _record("gone", 2**22 + 7, None)  # no such process
    placed, remote, unknown = places_of([here, far, gone])
    assert (placed.notebook, placed.server) == (os.path.join("work", "train.ipynb"), URL)
    assert remote.notebook is None and remote.server is None  # another host's process is not this one
    assert unknown.notebook is None and unknown.server is None


def test_processes_elsewhere_name_their_kernel_s_notebook_and_server(kernel: int) -> None:
    worker = _holder(kernel + 10**6, "worker", kernel_id="k1", cluster="one")  # its kernel found by its record
    loose = _holder(kernel + 10**6 + 1, "child", cluster="client")  # a kernel without an id: by its cluster
    own = _holder(kernel, "kernel", kernel_id="k3")  # the kernel itself
    stranger = _holder(kernel + 10**6 + 2, "worker", kernel_id="k-unknown")
    records = [_record("one", kernel, "k1"), _record("client", kernel, None)]
    found = with_whereabouts([worker, loose, own, stranger], records, [KernelRecord(pid=kernel, kernel_id="k3")])
    notebook = os.path.join("work", "train.ipynb")
    assert [(h.path, h.server) for h in found] == [(notebook, URL)] * 3 + [(None, None)]


def test_whose_a_process_no_notebook_holds_is() -> None:
    mine, gone, kernel = _holder(os.getpid(), "other"), _holder(2**22 + 7, "other"), _holder(os.getpid(), "kernel")
    found = with_users([mine, gone, kernel], simulated=False)
    assert (found[0].yours, found[0].user is not None) == (True, True)
    assert (found[1].yours, found[1].user) == (None, None)  # gone, or in another container: not said
    assert (found[2].yours, found[2].user) == (None, None)  # a notebook's: not looked at
    init = with_users([_holder(1, "other")], simulated=False)[0]
    assert init.yours is (os.getuid() == 0)  # pid 1: root's
    # simulated GPUs: their processes (all but the server's own) stand for other users' jobs
    simulated = with_users([_holder(2**22 + 7, "other"), mine], simulated=True)
    assert [(h.user, h.yours) for h in simulated] == [(None, False), (found[0].user, True)]


WRITE = """
from gpu_magics.cluster.records import record
record.write_record(record.ClusterRecord(name="theirs", scheduler_address="tcp://127.0.0.1:9", dashboard_url=None,
                                         kind="cpu", workers=1, **record.here()))
"""


@pytest.mark.slow
@pytest.mark.timeout(300)
async def test_the_fold_names_another_server_s_notebook_and_url(
    jp_fetch: Any, runtime_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another jupyter-server of the user's runs a notebook whose kernel starts a cluster: this server's ``GET
    clusters`` lists it under ``elsewhere`` with that notebook and that server's URL."""
    from jupyter_client.blocking.client import BlockingKernelClient

    from tests.prometheus.harness import JupyterServer

    (tmp_path / "other").mkdir()
    env = {"GPU_MAGICS_RUNTIME_DIR": str(runtime_dir), "GPU_MAGICS_SOURCE": "fake:2"}
    other = JupyterServer(tmp_path / "other", env)
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(other.runtime))  # one user's runtime directory, as on a machine
    other.start()
    try:
        session = other.api("POST", "api/sessions", {"path": "train.ipynb", "name": "train.ipynb", "type": "notebook",
                                                     "kernel": {"name": "python3"}})  # fmt: skip
        client = BlockingKernelClient(connection_file=str(other.runtime / f"kernel-{session['kernel']['id']}.json"))
        client.load_connection_file()
        client.start_channels(hb=False)
        try:
            client.wait_for_ready(timeout=120)
            reply = client.execute_interactive(WRITE, timeout=120, output_hook=lambda message: None)
            assert reply["content"]["status"] == "ok", reply["content"]
        finally:
            client.stop_channels()
        response = await jp_fetch("gpu-magics", "api", "clusters")
        (theirs,) = json.loads(response.body)["elsewhere"]
        assert (theirs["name"], theirs["kernel_id"]) == ("theirs", session["kernel"]["id"])
        assert (theirs["notebook"], theirs["server"]) == ("train.ipynb", other.url)
    finally:
        other.stop()
