"""Each server shows its own: two jupyter-servers of one user (one runtime directory for the records, as on a real
machine), a kernel of each with a cluster, and a kernel that jupyter_client started on its own (a ``tmp...json``
connection file) with a cluster. Each server's ``/metrics`` exports exactly its kernel's cluster with that kernel's
id, so a ``count()`` or ``sum()`` over both servers counts each cluster once; ``GET clusters`` lists the others only
under ``elsewhere``, with where they run; the jupyter_client kernel's record says it has no kernel id.

The first server's kernel starts a real cluster (``%gpucluster --cpu-workers 1``); the other two kernels write their
records with the record writer, from inside the kernel, so the kernel id and connection file are what the kernel
itself finds. Every process is ended at the end."""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from jupyter_client.blocking.client import BlockingKernelClient
from jupyter_client.manager import KernelManager, start_new_kernel
from prometheus_client.parser import text_string_to_metric_families

from tests.prometheus.harness import JupyterServer, ServerKernel
from tests.waiting import wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

WRITE = """
from gpu_magics.cluster.records import record
record.write_record(record.ClusterRecord(name={name!r}, scheduler_address="tcp://127.0.0.1:9", dashboard_url=None,
                                         kind="cpu", workers=1, **record.here()))
"""


@dataclass
class World:
    servers: tuple[JupyterServer, JupyterServer]
    kernels: tuple[ServerKernel, ServerKernel]
    client_kernel: tuple[KernelManager, BlockingKernelClient]
    records: Path


def _run(client: BlockingKernelClient, code: str) -> None:
    reply = client.execute_interactive(code, timeout=120, output_hook=lambda message: None)
    assert reply["content"]["status"] == "ok", reply["content"]


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    base = tmp_path_factory.mktemp("own-clusters")
    records = base / "gpu-magics-runtime"
    env = {"GPU_MAGICS_SOURCE": "fake:2", "GPU_MAGICS_RUNTIME_DIR": str(records)}
    directories = [base / "server-1", base / "server-2"]
    for directory in directories:
        directory.mkdir()
    servers = tuple(JupyterServer(d, env, "--GpuMagicsServer.metrics_interval=0.25") for d in directories)
    started: list[Any] = []
    try:
        for server in servers:
            server.start()
            started.append(server)
        first, second = ServerKernel(servers[0]), ServerKernel(servers[1])
        started += [first, second]
        first.run("%load_ext gpu_magics\n%gpucluster --cpu-workers 1 --name one")
        second.run(WRITE.format(name="two"))
        manager, client = start_new_kernel(kernel_name="python3", env={**os.environ, **env})
        started.append((manager, client))
        _run(client, WRITE.format(name="client"))
        yield World((servers[0], servers[1]), (first, second), (manager, client), records)
    finally:
        for thing in reversed(started):
            if isinstance(thing, tuple):
                thing[1].stop_channels()
                thing[0].shutdown_kernel(now=True)
            else:
                thing.stop()


def metrics(server: JupyterServer) -> dict[str, list[dict[str, str]]]:
    text = server.api("GET", "metrics")
    return {
        family.name: [sample.labels for sample in family.samples]
        for family in text_string_to_metric_families(text)
        if family.name.startswith("gpu_magics_")
    }


def exported(server: JupyterServer) -> dict[str, list[dict[str, str]]]:
    """The server's ``/metrics`` once its clusters are there (the first scrape starts the refreshes)."""
    return wait_for(lambda: (found := metrics(server)).get("gpu_magics_cluster_info") and found, 60,
                    "the cluster on /metrics")  # fmt: skip


def test_each_server_exports_only_its_kernel_s_cluster_with_its_kernel_id(world: World) -> None:
    counted = 0
    for server, kernel, name in zip(world.servers, world.kernels, ("one", "two"), strict=True):
        found = exported(server)
        (info,) = found["gpu_magics_cluster_info"]  # count(gpu_magics_cluster_info) on this target: 1
        assert (info["kernel_id"], info["cluster"], info["kind"]) == (kernel.id, name, "cpu")
        counted += len(found["gpu_magics_cluster_info"])
        ids = {labels["kernel_id"] for series in found.values() for labels in series if "kernel_id" in labels}
        assert ids == {kernel.id}  # every series carries this server's kernel's real id, none another's
        assert [labels["cluster"] for labels in found["gpu_magics_cluster_workers"]] == [name]
    assert counted == 2  # summed over both targets, each cluster once; the jupyter_client kernel's on neither


def test_get_clusters_lists_the_others_only_folded_with_where_they_run(world: World) -> None:
    (first, second), (one, two) = world.servers, world.kernels
    manager, _ = world.client_kernel
    for server, own, other, name in ((first, one, two, "one"), (second, two, one, "two")):
        reply = wait_for(lambda s=server: (r := s.api("GET", "gpu-magics/api/clusters"))["clusters"] and
                         len(r["elsewhere"]) == 2 and r, 60, "the clusters and the others")  # fmt: skip
        (cluster,) = reply["clusters"]
        assert (cluster["name"], cluster["kernel_id"], cluster["kernel_running"]) == (name, own.id, True)
        assert cluster["connection_file"] == f"kernel-{own.id}.json"
        elsewhere = {entry["name"]: entry for entry in reply["elsewhere"]}
        assert set(elsewhere) == {"one", "two", "client"} - {name}
        theirs = elsewhere["two" if name == "one" else "one"]
        assert (theirs["kernel_id"], theirs["connection_file"]) == (other.id, f"kernel-{other.id}.json")
        loose = elsewhere["client"]
        assert loose["kernel_id"] is None and loose["host"] == socket.gethostname()
        assert loose["connection_file"] == Path(manager.connection_file).name
        assert loose["pid"] == manager.provisioner.pid  # type: ignore[union-attr]


def test_a_kernel_jupyter_client_started_says_it_has_no_kernel_id(world: World) -> None:
    manager, _ = world.client_kernel
    name = Path(manager.connection_file).name
    assert name.startswith("tmp") and name.endswith(".json")  # jupyter_client's own: no kernel-<id>.json
    (path,) = world.records.glob("gpu-magics-cluster-*-client.json")
    data = json.loads(path.read_text())
    assert (data["kernel_id"], data["connection_file"], data["version"]) == (None, name, 6)
    assert oct(path.stat().st_mode & 0o777) == oct(0o600)
