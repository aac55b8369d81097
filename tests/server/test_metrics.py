"""The ``gpu_magics_*`` series on jupyter_server's own ``/metrics``: built from plain inputs first (names, labels as
dcgm-exporter spells them, no series where nothing is measured, a kernel's series gone once it ends), then from a
real jupyter-server on simulated GPUs with records written as kernels write them: an idle GPU's held memory counted,
a GPU that disappears, hostile and truncated records, a wrong token, 1000 scrapes."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
from prometheus_client import REGISTRY
from prometheus_client.parser import text_string_to_metric_families
from tornado.httpclient import AsyncHTTPClient, HTTPClientError, HTTPResponse

from gpu_magics.cluster.records import record as records
from gpu_magics.monitor.models import GpuProcess, GpuReading, HostReading, Snapshot
from gpu_magics.server.metrics import collector
from gpu_magics.server.metrics.frame import Frame, build
from gpu_magics.server.metrics.gather import Holding, Inputs, busiest, gather
from gpu_magics.server.metrics.idle import IdleHold
from gpu_magics.server.metrics.labels import Place
from gpu_magics.server.ownership.owners import GpuHolder
from tests.server.helpers import server_kernel

Fetch = Callable[..., Awaitable[HTTPResponse]]
GIB = 2**30
IDLE, BUSY, LOST = (f"GPU-7e570000-0000-0000-0000-00000000000{i}" for i in range(3))
PARENT, MIG = "GPU-7e570000-0000-0000-0000-000000000003", "MIG-7e570000-0000-0000-0000-000000000004"
SPEC = {
    "gpus": [
        {"name": "NVIDIA H100 80GB HBM3", "uuid": IDLE, "memory_total": 80 * GIB, "memory_used": 12 * GIB,
         "gpu_util": 0, "power": 70.5, "processes": []},
        {"name": "NVIDIA H100 80GB HBM3", "uuid": BUSY, "memory_total": 80 * GIB, "memory_used": 40 * GIB,
         "gpu_util": 97, "power": 650, "processes": []},
        {"name": "NVIDIA H100 80GB HBM3", "uuid": LOST, "memory_total": 80 * GIB, "memory_used": GIB,
         "gpu_util": 3, "lost_at_tick": 6},
        {"name": "NVIDIA A100-SXM4-40GB", "uuid": PARENT, "memory_total": 40 * GIB,
         "mig": [{"name": "NVIDIA A100-SXM4-40GB MIG 3g.20gb", "uuid": MIG, "memory_total": 20 * GIB,
                  "memory_used": GIB}]},
    ]
}  # fmt: skip


# -- built from plain inputs ------------------------------------------------------------------------


def reading(index: int, uuid: str, **values: Any) -> GpuReading:
    fields = dict.fromkeys(("memory_util", "temperature", "power_limit", "sm_clock", "pcie_rx", "pcie_tx",
                            "nvlink_rx", "nvlink_tx"))  # fmt: skip
    base = {"index": index, "nvml_index": index, "name": "NVIDIA H100", "uuid": uuid, "memory_total": 80 * GIB,
            "memory_used": GIB, "gpu_util": 0.0, "power": 100.0, "processes": (), **fields}  # fmt: skip
    return GpuReading(**{**base, **values})


def snapshot(*gpus: GpuReading, at: float = 1000.0) -> Snapshot:
    return Snapshot(at, gpus, HostReading(None, None, None, 1), None)


def holding(kernel: str | None, uuid: str, used: int, part: str = "kernel", **more: Any) -> Holding:
    holder = GpuHolder(pid=1, gpu=0, gpu_uuid=uuid, used_memory=used, kernel_id=kernel, path=None, cluster=None,
                       role="kernel" if part == "kernel" else "worker", **more)  # fmt: skip
    return Holding(holder, part)


def inputs(shot: Snapshot, *holdings: Holding, **more: Any) -> Inputs:
    base: dict[str, Any] = {"time": shot.time, "snapshot": shot, "busiest": busiest([], shot), "remote": (),
                            "records": (), "holdings": holdings, "paths": {}, "managed": frozenset()}  # fmt: skip
    return Inputs(**{**base, **more})


def samples(frame: Frame, running: set[str] | None = None, now: float = 1000.0) -> dict[str, list[Any]]:
    found: dict[str, list[Any]] = {}
    for metric in collector.metrics(frame, running if running is not None else set(frame.managed), now):
        found[metric.name] = [(s.labels, s.value) for s in metric.samples]
    return found


def build_frame(data: Inputs, idle: IdleHold | None = None, **options: Any) -> Frame:
    settings = {"idle_utilization": 5.0, "notebook_label": False, **options}
    return build(data, Place("gpu-node-1"), idle or IdleHold(), **settings)


def test_each_gpu_is_labelled_as_dcgm_exporter_labels_it_and_unmeasured_figures_have_no_series() -> None:
    mig = reading(1, MIG, name="A100 MIG 3g.20gb", mig_parent=PARENT, gpu_util=None, power=None)
    lost = reading(2, LOST, error="GPU is lost")
    found = samples(build_frame(inputs(snapshot(reading(0, IDLE, gpu_util=42.0), mig, lost))))
    whole = {"UUID": IDLE, "gpu": "0", "modelName": "NVIDIA H100", "Hostname": "gpu-node-1"}
    assert found["gpu_magics_gpu_utilization_ratio"] == [(whole, 0.42)]  # not the MIG instance's, not the lost GPU's
    assert found["gpu_magics_gpu_power_watts"] == [(whole, 100.0)]
    instance = {"UUID": PARENT, "mig_uuid": MIG, "gpu": "1", "modelName": "A100 MIG 3g.20gb", "Hostname": "gpu-node-1"}
    assert found["gpu_magics_gpu_memory_total_bytes"] == [(whole, 80 * GIB), (instance, 80 * GIB)]
    assert all(labels["UUID"] != LOST for values in found.values() for labels, _ in values)


def test_in_kubernetes_every_series_names_the_pod() -> None:
    place = Place.here({"KUBERNETES_SERVICE_HOST": "10.0.0.1", "POD_NAME": "jupyter-ada", "POD_NAMESPACE": "hub",
                        "NODE_NAME": "gpu-node-7"})  # fmt: skip
    assert place == Place("gpu-node-7", (("pod", "jupyter-ada"), ("namespace", "hub")))
    frame = build(inputs(snapshot(reading(0, IDLE)), holding("k1", IDLE, GIB)), place, IdleHold(),
                  idle_utilization=5.0, notebook_label=False)  # fmt: skip
    for values in samples(frame).values():
        assert all(labels["pod"] == "jupyter-ada" and labels["namespace"] == "hub" for labels, _ in values)
    assert Place.here({"NODE_NAME": "gpu-node-7"}) == Place("gpu-node-7")


def test_a_kernel_s_bytes_by_part_and_gone_once_the_server_no_longer_runs_it() -> None:
    shot = snapshot(reading(0, IDLE), reading(1, BUSY, gpu_util=90.0))
    held = [holding("k1", IDLE, GIB), holding("k1", IDLE, 2 * GIB, "workers"), holding("k1", IDLE, 3 * GIB, "workers"),
            holding("k1", BUSY, 4 * GIB, "ranks"), holding("k2", "GPU-remote-1", 5 * GIB, "workers", host="node-2"),
            holding(None, IDLE, 9 * GIB, "children"), holding("k3", IDLE, 0)]  # fmt: skip
    frame = build_frame(inputs(shot, *held, managed=frozenset({"k1", "k2"})))
    memory = samples(frame)["gpu_magics_kernel_gpu_memory_bytes"]
    assert sorted((s["kernel_id"], s["UUID"], s["Hostname"], s["part"], v) for s, v in memory) == [
        ("k1", IDLE, "gpu-node-1", "kernel", GIB),
        ("k1", IDLE, "gpu-node-1", "workers", 5 * GIB),
        ("k1", BUSY, "gpu-node-1", "ranks", 4 * GIB),
        ("k2", "GPU-remote-1", "node-2", "workers", 5 * GIB),
    ]
    after = samples(frame, running={"k2"})
    assert {labels["kernel_id"] for labels, _ in after["gpu_magics_kernel_gpu_memory_bytes"]} == {"k2"}


def test_a_kernel_s_share_of_a_gpu_s_time_adds_up_its_processes_and_is_absent_where_not_measured() -> None:
    shot = snapshot(reading(0, IDLE), reading(1, BUSY, gpu_util=90.0))
    held = [holding("k1", BUSY, GIB, sm_util=60.0), holding("k1", BUSY, GIB, "workers", sm_util=25.0),
            holding("k2", BUSY, GIB, sm_util=3.0), holding("k1", IDLE, GIB, sm_util=None),  # not measured there
            holding(None, BUSY, GIB, "children", sm_util=9.0),  # no kernel's
            holding("k3", "GPU-remote-1", GIB, "workers", host="node-2", sm_util=50.0)]  # fmt: skip
    frame = build_frame(inputs(shot, *held, managed=frozenset({"k1", "k2", "k3"}), paths={"k1": "train.ipynb"}),
                        notebook_label=True)  # fmt: skip
    time = samples(frame)["gpu_magics_kernel_gpu_time_ratio"]
    assert sorted((s["kernel_id"], s["UUID"], s.get("notebook"), round(v, 3)) for s, v in time) == [
        ("k1", BUSY, "train.ipynb", 0.85),
        ("k2", BUSY, "", 0.03),
    ]


def test_a_notebooks_cap_is_a_series_per_kernel_and_gpu_where_one_binds() -> None:
    shot = snapshot(reading(0, IDLE), reading(1, BUSY))
    held = [holding("k1", BUSY, GIB, memory_cap=8 * GIB, memory_cap_by="notebook"),
            holding("k1", BUSY, GIB, "workers", memory_cap=8 * GIB, memory_cap_by="notebook"),
            holding("k2", IDLE, GIB, memory_cap=20 * GIB, memory_cap_by="server"),
            holding("k3", IDLE, GIB),  # no cap binds
            holding("k4", "GPU-remote-1", GIB, "workers", host="node-2", memory_cap=GIB)]  # fmt: skip
    frame = build_frame(inputs(shot, *held, managed=frozenset({"k1", "k2", "k3", "k4"})))
    caps = samples(frame)["gpu_magics_kernel_gpu_memory_cap_bytes"]
    assert sorted((s["kernel_id"], s["UUID"], s["by"], v) for s, v in caps) == [
        ("k1", BUSY, "notebook", 8 * GIB),
        ("k2", IDLE, "server", 20 * GIB),
    ]


def test_memory_held_on_idle_gpus_counts_from_the_first_idle_refresh() -> None:
    idle = IdleHold()
    first = build_frame(inputs(snapshot(reading(0, IDLE), at=1000.0), holding("k1", IDLE, GIB)), idle)
    assert samples(first, now=1030.0)["gpu_magics_kernel_idle_hold_seconds"] == [({"kernel_id": "k1"}, 30.0)]
    later = build_frame(inputs(snapshot(reading(0, IDLE), at=1060.0), holding("k1", IDLE, GIB)), idle)
    assert samples(later, now=1090.0)["gpu_magics_kernel_idle_hold_seconds"] == [({"kernel_id": "k1"}, 90.0)]
    busy = build_frame(inputs(snapshot(reading(0, IDLE, gpu_util=60.0), at=1100.0), holding("k1", IDLE, GIB)), idle)
    assert samples(busy, now=1130.0)["gpu_magics_kernel_idle_hold_seconds"] == [({"kernel_id": "k1"}, 0.0)]
    again = build_frame(inputs(snapshot(reading(0, IDLE), at=1200.0), holding("k1", IDLE, GIB)), idle)
    assert samples(again, now=1210.0)["gpu_magics_kernel_idle_hold_seconds"] == [({"kernel_id": "k1"}, 10.0)]
    mig = reading(0, MIG, mig_parent=PARENT, gpu_util=None)  # utilization unknown: no series, not 0
    unknown = build_frame(inputs(snapshot(mig, at=1300.0), holding("k1", MIG, GIB)), idle)
    assert "gpu_magics_kernel_idle_hold_seconds" not in samples(unknown)


def test_a_busy_moment_between_refreshes_is_not_idle() -> None:
    history = [snapshot(reading(0, IDLE, gpu_util=80.0), at=990.0)]
    data = inputs(snapshot(reading(0, IDLE)), holding("k1", IDLE, GIB), busiest=busiest(history, None))
    assert samples(build_frame(data))["gpu_magics_kernel_idle_hold_seconds"] == [({"kernel_id": "k1"}, 0.0)]


def test_clusters_their_origin_and_idle_clock() -> None:
    started = records.ClusterRecord(name="train", scheduler_address="tcp://127.0.0.1:1", dashboard_url=None,
                                    kind="gpu", workers=2, gpus=("0", "1"), kernel_id="k1", idle_timeout=1800.0,
                                    idle_since=900.0)  # fmt: skip
    attached = records.ClusterRecord(name="shared", scheduler_address="tcp://10.0.0.2:1", dashboard_url=None,
                                     kind="attached", workers=8, kernel_id="k2")  # fmt: skip
    connected = records.ClusterRecord(name="gw", scheduler_address="gateway://x:1", dashboard_url=None,
                                      kind="gateway", workers=4, kernel_id="k3",
                                      facts={"owned": False, "ends": "detach"})  # fmt: skip
    found = samples(build_frame(inputs(snapshot(), records=(started, attached, connected))))
    assert found["gpu_magics_cluster_workers"][:2] == [({"kernel_id": "k1", "cluster": "train"}, 2.0),
                                                       ({"kernel_id": "k2", "cluster": "shared"}, 8.0)]  # fmt: skip
    assert found["gpu_magics_cluster_gpus"][0][1] == 2.0
    # the manager's word where the record has it (a --gateway --connect cluster was not started here)
    assert [labels["started_here"] for labels, _ in found["gpu_magics_cluster_info"]] == ["true", "false", "false"]
    assert found["gpu_magics_cluster_idle_seconds"] == [({"kernel_id": "k1", "cluster": "train"}, 100.0)]


def test_a_parked_cluster_says_its_parked_workers_and_the_bytes_it_gave_back() -> None:
    parked = records.ClusterRecord(name="train", scheduler_address="tcp://127.0.0.1:1", dashboard_url=None,
                                   kind="gpu", workers=2, gpus=("0", "1"), kernel_id="k1",
                                   parked={"since": 950.0, "bytes": 9 * GIB, "workers": 2})  # fmt: skip
    running = records.ClusterRecord(name="other", scheduler_address="tcp://127.0.0.1:2", dashboard_url=None,
                                    kind="gpu", workers=1, gpus=("2",), kernel_id="k2")  # fmt: skip
    assert records.ClusterRecord.from_json(parked.to_json()) == parked
    found = samples(build_frame(inputs(snapshot(), records=(parked, running))))
    assert found["gpu_magics_cluster_parked_workers"] == [({"kernel_id": "k1", "cluster": "train"}, 2.0),
                                                          ({"kernel_id": "k2", "cluster": "other"}, 0.0)]  # fmt: skip
    assert found["gpu_magics_cluster_parked_bytes"] == [({"kernel_id": "k1", "cluster": "train"}, 9.0 * GIB),
                                                        ({"kernel_id": "k2", "cluster": "other"}, 0.0)]  # fmt: skip


def test_the_notebook_label_only_where_the_admin_turns_it_on() -> None:
    data = inputs(snapshot(reading(0, IDLE)), holding("k1", IDLE, GIB), paths={"k1": "work/train.ipynb"})
    (labels, _), *_ = samples(build_frame(data, notebook_label=True))["gpu_magics_kernel_gpu_memory_bytes"]
    assert labels["notebook"] == "work/train.ipynb"
    (labels, _), *_ = samples(build_frame(data))["gpu_magics_kernel_gpu_memory_bytes"]
    assert "notebook" not in labels


def test_one_kernel_cannot_flood_the_endpoint() -> None:
    many = [holding("k1", f"GPU-{n:08d}", GIB) for n in range(5000)]
    assert len(samples(build_frame(inputs(snapshot(), *many)))["gpu_magics_kernel_gpu_memory_bytes"]) == 256


WORKER = """
import subprocess, sys, time
loader = ("import subprocess, sys, time; c = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)']); "
          "print(c.pid, flush=True); time.sleep(120)")
rank = subprocess.Popen([sys.executable, "-c", loader, "gpu_magics.spmd.rank"], stdout=subprocess.PIPE, text=True)
print(rank.pid, rank.stdout.readline().strip(), flush=True)
time.sleep(120)
"""


def test_a_kernel_s_processes_are_told_apart_by_their_tree(runtime_dir: Path) -> None:
    """This process stands for the kernel: a cluster worker it started, that worker's rank process (its command line
    names the rank module) and the rank's DataLoader-like child, and another child of the kernel."""
    worker = subprocess.Popen([sys.executable, "-c", WORKER], stdout=subprocess.PIPE, text=True)
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        assert worker.stdout is not None
        rank, loader = (int(pid) for pid in worker.stdout.readline().split())
        member = {"name": "0", "role": "worker", "pid": worker.pid, "host": "127.0.0.1", "gpus": []}
        cluster = records.ClusterRecord(name="c", scheduler_address="tcp://127.0.0.1:1", dashboard_url=None,
                                        kind="cpu", workers=1, kernel_id="k1", members=(member,))  # fmt: skip
        records.write_record(cluster)
        pids = (worker.pid, rank, loader, other.pid)
        shot = snapshot(reading(0, IDLE, processes=tuple(GpuProcess(pid, GIB) for pid in pids)))
        data = gather(shot, [], {os.getpid(): "k1"}, {}, frozenset({"k1"}))
        parts = {h.holder.pid: h.part for h in data.holdings}
        assert parts == {worker.pid: "workers", rank: "ranks", loader: "ranks", other.pid: "children"}
        memory = samples(build_frame(data))["gpu_magics_kernel_gpu_memory_bytes"]
        assert sorted((labels["part"], value) for labels, value in memory) == [
            ("children", GIB),
            ("ranks", 2 * GIB),
            ("workers", GIB),
        ]
    finally:
        for process in (worker, other):
            process.kill()
            process.wait(10)
        for pid in (locals().get("rank"), locals().get("loader")):
            if isinstance(pid, int):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)


def test_the_collector_is_registered_once_and_a_closing_server_leaves() -> None:
    class Still:
        def scraped(self) -> Frame:
            return build_frame(inputs(snapshot(reading(0, IDLE))))

        def running_kernels(self) -> set[str]:
            return set()

    first, second = Still(), Still()
    registered = collector.attach(first)
    assert collector.attach(second) is registered
    collector.detach(first)  # not the one attached now: nothing changes
    assert REGISTRY.get_sample_value("gpu_magics_gpu_power_watts", {"UUID": IDLE, "gpu": "0", "modelName":
                                     "NVIDIA H100", "Hostname": "gpu-node-1"}) == 100.0  # fmt: skip
    collector.detach(second)
    assert REGISTRY.get_sample_value("gpu_magics_gpu_power_watts", {"UUID": IDLE, "gpu": "0", "modelName":
                                     "NVIDIA H100", "Hostname": "gpu-node-1"}) is None  # fmt: skip


# -- a real server ------------------------------------------------------------------------------------


@pytest.fixture
def spec(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "gpus.json"
    path.write_text(json.dumps(SPEC))
    monkeypatch.setenv("GPU_MAGICS_SOURCE", f"fake:{path}")
    return path


@pytest.fixture
def jp_server_config(runtime_dir: Path, spec: Path) -> dict[str, Any]:
    return {
        "ServerApp": {"jpserver_extensions": {"gpu_magics": True}},
        "GpuMagicsServer": {"source": "fake", "interval": 0.1, "slow_interval": 0.1, "metrics_interval": 0.1},
    }


def parse(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    return {
        family.name: [(sample.labels, sample.value) for sample in family.samples]
        for family in text_string_to_metric_families(text)
        if family.name.startswith("gpu_magics_")
    }


async def scrape_until(jp_fetch: Fetch, done: Callable[[dict[str, Any]], Any], timeout: float = 20.0) -> Any:
    deadline = time.monotonic() + timeout
    found: dict[str, Any] = {}
    while time.monotonic() < deadline:
        response = await jp_fetch("metrics")
        assert response.code == 200
        found = parse(response.body.decode())
        if done(found):
            return found
        await asyncio.sleep(0.1)
    raise AssertionError(f"/metrics never showed what was waited for; last: {json.dumps(found)[:3000]}")


def uuids(found: dict[str, Any], name: str) -> set[str]:
    return {labels["UUID"] for labels, _ in found.get(name, [])}


@pytest.fixture
def sleeper() -> Iterator[subprocess.Popen[bytes]]:
    """A process that stands for a kernel that wrote its record."""
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        yield process
    finally:
        process.kill()
        process.wait(10)


def kernel_record(pid: int, kernel_id: str, uuid: str = IDLE, used: int = 3 * GIB) -> records.KernelRecord:
    gpu = {"index": 0, "uuid": uuid, "name": "NVIDIA H100 80GB HBM3", "label": "GPU 0", "memory_total": 80 * GIB,
           "process_memory": used, "process_memory_source": "cupy", "array_memory": GIB, "cached_memory": used - GIB,
           "context_memory": 0}  # fmt: skip
    return records.KernelRecord(gpus=(gpu,), pid=pid, kernel_id=kernel_id, started_at=time.time())


@pytest.mark.slow  # a real kernel of the server
async def test_gpus_a_kernel_s_bytes_and_its_idle_hold_and_a_gpu_that_disappears(
    jp_fetch: Fetch, sleeper: subprocess.Popen[bytes]
) -> None:
    async with server_kernel(jp_fetch) as kernel_id:
        await _a_kernel_s_bytes_and_a_gpu_that_disappears(jp_fetch, sleeper, kernel_id)


async def _a_kernel_s_bytes_and_a_gpu_that_disappears(
    jp_fetch: Fetch, sleeper: subprocess.Popen[bytes], kernel_id: str
) -> None:
    records.write_record(kernel_record(sleeper.pid, kernel_id))  # the sleeper stands for the kernel's process
    found = await scrape_until(jp_fetch, lambda f: len(uuids(f, "gpu_magics_gpu_memory_total_bytes")) == 4
                               and f.get("gpu_magics_kernel_idle_hold_seconds"))  # fmt: skip
    assert uuids(found, "gpu_magics_gpu_utilization_ratio") == {IDLE, BUSY, LOST}  # not the MIG instance
    mig = [labels for labels, _ in found["gpu_magics_gpu_memory_total_bytes"] if labels["UUID"] == PARENT]
    assert mig == [{"UUID": PARENT, "mig_uuid": MIG, "gpu": mig[0]["gpu"], "modelName":
                    "NVIDIA A100-SXM4-40GB MIG 3g.20gb", "Hostname": mig[0]["Hostname"]}]  # fmt: skip
    (labels, value), = found["gpu_magics_kernel_gpu_memory_bytes"]  # fmt: skip
    assert (labels["kernel_id"], labels["UUID"], labels["part"], value) == (kernel_id, IDLE, "kernel", 3 * GIB)
    held = found["gpu_magics_kernel_idle_hold_seconds"][0][1]
    later = await scrape_until(jp_fetch, lambda f: f["gpu_magics_kernel_idle_hold_seconds"][0][1] >= held + 0.5)
    assert later["gpu_magics_kernel_gpu_memory_bytes"] == found["gpu_magics_kernel_gpu_memory_bytes"]
    # the GPU lost at its 6th tick (0.5 s each): its series leave, the others stay right
    gone = await scrape_until(jp_fetch, lambda f: LOST not in uuids(f, "gpu_magics_gpu_memory_used_bytes"))
    assert uuids(gone, "gpu_magics_gpu_memory_used_bytes") == {IDLE, BUSY, PARENT}
    assert uuids(gone, "gpu_magics_gpu_utilization_ratio") == {IDLE, BUSY}
    # the kernel's process ends (killed: its record stays behind): its series leave at the next refresh
    sleeper.kill()
    sleeper.wait(10)
    ended = await scrape_until(jp_fetch, lambda f: "gpu_magics_kernel_gpu_memory_bytes" not in f)
    assert "gpu_magics_kernel_idle_hold_seconds" not in ended
    assert uuids(ended, "gpu_magics_gpu_memory_used_bytes") == {IDLE, BUSY, PARENT}


HOSTILE = {
    "gpu-magics-kernel-1.json": '{"pid": 1, "kernel_id": "k-trunc", "time": 1, "gpus": [{"uuid": "GPU-',
    "gpu-magics-kernel-2.json": "\x00\xff" * 100,
    "gpu-magics-kernel-3.json": '{"pid": "self", "kernel_id": "k", "time": 1, "started_at": 1}',
    "gpu-magics-kernel-4.json": '[1, 2, 3]',
    "gpu-magics-kernel-6.json": "[" * 100_000,
    "gpu-magics-cluster-5-x.json": '{"name": "x", "kind": "gpu", "workers": "many"}',
}  # fmt: skip


@pytest.mark.slow  # a real kernel of the server
async def test_hostile_and_truncated_records_leave_metrics_answering_and_the_rest_right(
    jp_fetch: Fetch, runtime_dir: Path, sleeper: subprocess.Popen[bytes]
) -> None:
    async with server_kernel(jp_fetch) as weird, server_kernel(jp_fetch) as good:
        await _hostile_and_truncated_records(jp_fetch, runtime_dir, sleeper, weird, good)


async def _hostile_and_truncated_records(
    jp_fetch: Fetch, runtime_dir: Path, sleeper: subprocess.Popen[bytes], weird: str, good: str
) -> None:
    for name, text in HOSTILE.items():
        (runtime_dir / name).write_text(text, encoding="latin-1")
    now = time.time()
    weird_gpus = [{"uuid": 'GPU-"quoted"\nnew line\\', "process_memory": 2 * GIB},
                  {"uuid": IDLE, "process_memory": "lots"}, {"uuid": BUSY, "process_memory": float("nan")},
                  {"uuid": ["not", "text"], "process_memory": 5}, "not a GPU", {"process_memory": 7},
                  {"uuid": LOST, "process_memory": 2 * GIB}]  # fmt: skip
    hostile_kernel = {"pid": sleeper.pid, "kernel_id": weird, "time": now, "started_at": now, "gpus": weird_gpus,
                      "version": records.KERNEL_SCHEMA_VERSION}  # fmt: skip
    (runtime_dir / f"gpu-magics-kernel-{sleeper.pid}.json").write_text(json.dumps(hostile_kernel))
    bad_members = {"name": "bad", "scheduler_address": "tcp://x:1", "dashboard_url": None, "kind": "gpu",
                   "workers": 1, "pid": sleeper.pid, "kernel_id": weird, "started_at": now,
                   "members": [{"role": "worker", "pid": "abc",
                                "gpus": [{"uuid": BUSY, "process_memory": GIB}]}]}  # fmt: skip
    (runtime_dir / f"gpu-magics-cluster-{sleeper.pid}-bad.json").write_text(json.dumps(bad_members))
    records.write_record(kernel_record(os.getpid(), good, BUSY, 4 * GIB))
    found = await scrape_until(jp_fetch, lambda f: len(f.get("gpu_magics_kernel_gpu_memory_bytes", [])) >= 2)
    memory = {
        (labels["kernel_id"], labels["UUID"]): value for labels, value in found["gpu_magics_kernel_gpu_memory_bytes"]
    }
    assert memory == {(good, BUSY): 4 * GIB, (weird, LOST): 2 * GIB}  # GPUs that are not GPUs: left out
    assert "gpu_magics_cluster_workers" not in found  # its workers are not what a kernel writes: the record is out
    assert uuids(found, "gpu_magics_gpu_memory_total_bytes") == {IDLE, BUSY, LOST, PARENT}


async def test_a_wrong_token_is_refused_as_jupyter_server_refuses_it(
    jp_serverapp: Any, jp_base_url: str, jp_fetch: Fetch
) -> None:
    await scrape_until(jp_fetch, lambda f: bool(f.get("gpu_magics_gpu_memory_total_bytes")))
    url = f"http://127.0.0.1:{jp_serverapp.port}{jp_base_url}metrics"
    for headers in ({}, {"Authorization": "token not-the-token"}):
        with pytest.raises(HTTPClientError) as error:
            await AsyncHTTPClient().fetch(url, headers=headers)
        assert error.value.code == 403
    assert jp_serverapp.authenticate_prometheus is True


class TestWithoutAuthentication:
    """Where the admin turns jupyter_server's ``authenticate_prometheus`` off, the series are open as its own are."""

    @pytest.fixture
    def jp_server_config(self, runtime_dir: Path, spec: Path) -> dict[str, Any]:
        return {
            "ServerApp": {"jpserver_extensions": {"gpu_magics": True}, "authenticate_prometheus": False},
            "GpuMagicsServer": {"source": "fake", "interval": 0.1, "metrics_interval": 0.1},
        }

    async def test_open_metrics(self, jp_serverapp: Any, http_server_client: Any, jp_base_url: str) -> None:
        url = f"http://127.0.0.1:{jp_serverapp.port}{jp_base_url}metrics"
        for _ in range(100):
            text = (await AsyncHTTPClient().fetch(url)).body.decode()
            if "gpu_magics_gpu_memory_total_bytes" in text:
                return
            await asyncio.sleep(0.1)
        raise AssertionError(text)


class TestTurnedOff:
    @pytest.fixture
    def jp_server_config(self, runtime_dir: Path, spec: Path) -> dict[str, Any]:
        return {
            "ServerApp": {"jpserver_extensions": {"gpu_magics": True}},
            "GpuMagicsServer": {"source": "fake", "metrics": False},
        }

    async def test_no_series(self, jp_fetch: Fetch) -> None:
        await asyncio.sleep(0.5)
        text = (await jp_fetch("metrics")).body.decode()
        assert "jupyter_server_info" in text and "gpu_magics_" not in text


@pytest.mark.slow  # ten seconds of scrapes
async def test_a_thousand_scrapes_leave_threads_fds_and_memory_flat(jp_fetch: Fetch, sleeper: Any) -> None:
    async with server_kernel(jp_fetch) as kernel_id:
        await _a_thousand_scrapes(jp_fetch, sleeper, kernel_id)


async def _a_thousand_scrapes(jp_fetch: Fetch, sleeper: Any, kernel_id: str) -> None:
    records.write_record(kernel_record(sleeper.pid, kernel_id))
    await scrape_until(jp_fetch, lambda f: bool(f.get("gpu_magics_kernel_idle_hold_seconds")))
    process = psutil.Process()
    for _ in range(100):  # warm: caches, connections
        await jp_fetch("metrics")
    before = (_threads(), process.num_fds(), process.memory_info().rss)
    for _ in range(1000):
        assert "gpu_magics_kernel_gpu_memory_bytes" in (await jp_fetch("metrics")).body.decode()
    after = (_threads(), process.num_fds(), process.memory_info().rss)
    # the event loop's executor (which reads the records) may start threads up to its bound; no other thread starts
    assert after[0][0] == before[0][0] and after[0][1] <= min(32, (os.cpu_count() or 1) + 4), (before, after)
    assert after[1] <= before[1] + 2, (before, after)
    assert after[2] - before[2] < 16 * 2**20, (before, after)


def _threads() -> tuple[int, int]:
    """(threads other than the event loop's executor's, the executor's)."""
    names = [thread.name for thread in threading.enumerate()]
    pool = sum(1 for name in names if name.startswith("asyncio_"))
    return len(names) - pool, pool
