"""The server shows a cluster's workers and their GPUs on other hosts, and GPU memory by notebook from what the
kernel's workers report about themselves, without NVML on those hosts and with NVML's process list refused.

A kernel of the server attaches to a cluster started with Dask's CLI: a scheduler and two workers on 127.0.0.2 and
127.0.0.3, each with two simulated GPUs.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from jupyter_client.blocking.client import BlockingKernelClient
from tornado.httpclient import HTTPResponse

from tests.cli_cluster import CliCluster, cli_cluster
from tests.server.helpers import server_kernel
from tests.server.test_leftovers import run_cell

pytestmark = pytest.mark.slow

Fetch = Callable[..., Awaitable[HTTPResponse]]
SPEC = Path(__file__).resolve().parent.parent / "data" / "worker_gpus.json"
HOSTS = ("127.0.0.2", "127.0.0.3")

CELL = """
%load_ext gpu_magics
%gpucluster --address {address} --name remote
"""


@pytest.fixture(scope="module")
def remote(tmp_path_factory: pytest.TempPathFactory) -> Iterator[CliCluster]:
    workers = {f"node-{host[-1]}": (host, {"GPU_MAGICS_SOURCE": f"fake:{SPEC}"}) for host in HOSTS}
    with cli_cluster(workers, tmp_path_factory.mktemp("server-cli-cluster")) as started:
        yield started


@contextlib.asynccontextmanager
async def attached_kernel(jp_fetch: Fetch, jp_serverapp: Any, remote: CliCluster) -> AsyncIterator[str]:
    """A kernel of the test's server, attached to the remote cluster (its record, as the kernel writes it)."""
    async with server_kernel(jp_fetch) as kernel_id:
        kernel = jp_serverapp.kernel_manager.get_kernel(kernel_id)
        client = BlockingKernelClient(connection_file=kernel.connection_file)
        client.load_connection_file()
        client.start_channels(hb=False)
        try:
            client.wait_for_ready(timeout=90)
            run_cell(client, CELL.format(address=remote.address))
            yield kernel_id
        finally:
            client.stop_channels()


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
    jp_fetch: Fetch, jp_serverapp: Any, refused_process_list: None, remote: CliCluster
) -> None:
    async with attached_kernel(jp_fetch, jp_serverapp, remote) as kernel_id:
        data = await poll(jp_fetch, "clusters", _members_with_memory)
    (cluster,) = data["clusters"]
    assert cluster["name"] == "remote" and cluster["kind"] == "attached" and cluster["kernel_id"] == kernel_id
    assert cluster["connection_file"] == f"kernel-{kernel_id}.json" and data["elsewhere"] == []
    members = {member["host_label"]: member for member in cluster["members"]}
    assert set(members) == set(HOSTS)
    labels = {gpu["label"] for member in cluster["members"] for gpu in member["gpus"]}
    assert labels == {f"{host} · GPU {index}" for host in HOSTS for index in (0, 1)}
    assert all(member["role"] == "worker" and member["time"] for member in cluster["members"])


async def test_memory_by_notebook_comes_from_self_reports(
    jp_fetch: Fetch, jp_serverapp: Any, refused_process_list: None, remote: CliCluster
) -> None:
    async with attached_kernel(jp_fetch, jp_serverapp, remote):
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
