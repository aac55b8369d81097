"""The server shows a cluster's workers and their GPUs on other hosts, and GPU memory by notebook from what the
kernel's workers report about themselves, without NVML on those hosts and with NVML's process list refused.

A real kernel process (IPython with the extension) attaches to a cluster started with Dask's CLI: a scheduler
and two workers on 127.0.0.2 and 127.0.0.3, each with two simulated GPUs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from tornado.httpclient import HTTPResponse

from tests.cli_cluster import CliCluster, cli_cluster

pytestmark = pytest.mark.slow

Fetch = Callable[..., Awaitable[HTTPResponse]]
SPEC = Path(__file__).resolve().parent.parent / "data" / "worker_gpus.json"
HOSTS = ("127.0.0.2", "127.0.0.3")

KERNEL = textwrap.dedent(
    """
    import sys, time
    from IPython.testing.globalipapp import start_ipython
    from IPython.utils.capture import capture_output

    shell = start_ipython()
    shell.run_line_magic("load_ext", "gpu_magics")
    with capture_output():
        shell.run_line_magic("gpucluster", "--address " + sys.argv[1] + " --name remote")
    print("ready", flush=True)
    time.sleep(120)
    """
)


@pytest.fixture(scope="module")
def remote(tmp_path_factory: pytest.TempPathFactory) -> Iterator[CliCluster]:
    workers = {f"node-{host[-1]}": (host, {"GPU_MAGICS_SOURCE": f"fake:{SPEC}"}) for host in HOSTS}
    with cli_cluster(workers, tmp_path_factory.mktemp("server-cli-cluster")) as started:
        yield started


@pytest.fixture
def kernel(remote: CliCluster, runtime_dir: Path, tmp_path: Path) -> Iterator[subprocess.Popen[str]]:
    env = {**os.environ, "GPU_MAGICS_SOURCE": "fake:0", "GPU_MAGICS_RUNTIME_DIR": str(runtime_dir)}
    process = subprocess.Popen(
        [sys.executable, "-c", KERNEL, remote.address],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        assert line.strip() == "ready", line
        yield process
    finally:
        process.kill()
        process.wait(timeout=10)


@pytest.fixture
def refused_process_list(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The server's own GPUs refuse NVML's process list (as in a container that hides host pids)."""
    gpu = {"name": "NVIDIA H200", "uuid": "GPU-serv0000", "memory_total": 2**37, "processes": "!NoPermission"}
    spec = {"gpus": [gpu]}
    path = tmp_path / "server_gpus.json"
    path.write_text(json.dumps(spec))
    monkeypatch.setenv("GPU_MAGICS_SOURCE", f"fake:{path}")


async def poll(fetch: Fetch, route: str, done: Callable[[Any], bool], timeout: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout
    data: Any = None
    while time.monotonic() < deadline:
        data = json.loads((await fetch("gpu-magics", "api", route)).body.decode())
        if done(data):
            return data
        await _sleep(0.25)
    raise AssertionError(f"{route} never answered as expected; last: {json.dumps(data)[:2000]}")


async def _sleep(seconds: float) -> None:
    import asyncio

    await asyncio.sleep(seconds)


def _members_with_memory(data: Any) -> bool:
    clusters = data["clusters"]
    return bool(clusters) and all(
        len(c["members"]) == 2 and all(m["gpus"] and m["gpus"][0]["process_memory"] for m in c["members"])
        for c in clusters
    )


async def test_clusters_endpoint_shows_both_hosts_gpus(
    jp_fetch: Fetch, refused_process_list: None, kernel: subprocess.Popen[str]
) -> None:
    data = await poll(jp_fetch, "clusters", _members_with_memory)
    (cluster,) = data["clusters"]
    assert cluster["name"] == "remote" and cluster["kind"] == "attached"
    members = {member["host_label"]: member for member in cluster["members"]}
    assert set(members) == set(HOSTS)
    labels = {gpu["label"] for member in cluster["members"] for gpu in member["gpus"]}
    assert labels == {f"{host} · GPU {index}" for host in HOSTS for index in (0, 1)}
    assert all(member["role"] == "worker" and member["time"] for member in cluster["members"])


async def test_memory_by_notebook_comes_from_self_reports(
    jp_fetch: Fetch, refused_process_list: None, kernel: subprocess.Popen[str]
) -> None:
    await poll(jp_fetch, "clusters", _members_with_memory)
    # the server's own GPU refuses its process list: listed as unreadable once it has been read
    data = await poll(jp_fetch, "processes", lambda d: len(d["processes"]) >= 2 and d["unreadable_gpus"] == [0])
    rows = {row["gpu_label"]: row for row in data["processes"]}
    for host in HOSTS:
        row = rows[f"{host} · GPU 0"]
        assert row["source"] == "self-report"
        assert row["used_memory"] == 3 * 2**30
        assert row["cluster"] == "remote" and row["role"] == "worker"
        assert row["worker"] == f"node-{host[-1]}" and row["host"] == host
