"""Mapping GPU processes to kernels, clusters and notebooks (pure; no server)."""

from __future__ import annotations

from gpu_magics.cluster.records.record import ClusterRecord, KernelRecord
from gpu_magics.monitor.models import GpuProcess, GpuReading, HostReading, Snapshot
from gpu_magics.server.ownership.owners import map_owners, with_self_reports


def _gpu(index: int, *pids: int) -> GpuReading:
    return GpuReading(
        index=index, nvml_index=index, name="GPU", uuid=f"GPU-{index}", memory_total=100, memory_used=10,
        gpu_util=None, memory_util=None, temperature=None, power=None, power_limit=None, sm_clock=None,
        pcie_rx=None, pcie_tx=None, nvlink_rx=None, nvlink_tx=None,
        processes=tuple(GpuProcess(pid=pid, used_memory=pid) for pid in pids),
    )  # fmt: skip


def _snapshot(*gpus: GpuReading) -> Snapshot:
    host = HostReading(cpu_percent=None, memory_used=None, memory_total=None, cpu_count=1)
    return Snapshot(time=1.0, gpus=gpus, host=host, status=None)


PARENTS = {100: 1, 200: 100, 300: 200, 400: 1, 500: 450, 450: 1, 900: 1}


def ancestry(pid: int) -> list[int]:
    chain = [pid]
    while chain[-1] in PARENTS:
        chain.append(PARENTS[chain[-1]])
    return chain


def test_kernel_workers_children_and_strangers() -> None:
    record = ClusterRecord(name="gpu", scheduler_address="tcp://x:1", dashboard_url=None, kind="gpu", workers=2,
                           pid=100, kernel_id="k1", started_at=0.0)  # fmt: skip
    remote = ClusterRecord(name="far", scheduler_address="tcp://x:2", dashboard_url=None, kind="gpu", workers=1,
                           pid=450, kernel_id="k9", started_at=0.0)  # fmt: skip
    holders = map_owners(
        _snapshot(_gpu(0, 100, 300), _gpu(1, 400, 500, 900)),
        kernel_pids={100: "k1", 400: "k2"},
        records=[record, remote],
        paths={"k1": "a.ipynb", "k2": "b.ipynb"},
        ancestry=ancestry,
    )
    got = {(h.pid, h.gpu): (h.kernel_id, h.path, h.cluster, h.role) for h in holders}
    assert got == {
        (100, 0): ("k1", "a.ipynb", None, "kernel"),
        (300, 0): ("k1", "a.ipynb", "gpu", "worker"),
        (400, 1): ("k2", "b.ipynb", None, "kernel"),
        (500, 1): ("k9", None, "far", "worker"),
        (900, 1): (None, None, None, "other"),
    }


def test_a_kernel_s_own_children_are_not_its_cluster_s_workers() -> None:
    """Once the workers have reported, a process the kernel started that is none of them (nor theirs) is its child,
    as /metrics counts it (part="children"); what a worker starts stays the cluster's."""
    worker = {"name": "w", "role": "worker", "pid": 200, "host": "127.0.0.1", "gpus": []}
    record = ClusterRecord(name="gpu", scheduler_address="tcp://x:1", dashboard_url=None, kind="cpu", workers=1,
                           pid=100, kernel_id="k1", started_at=0.0, members=(worker,))  # fmt: skip
    parents = {**PARENTS, 600: 100}

    def lineage(pid: int) -> list[int]:
        chain = [pid]
        while chain[-1] in parents:
            chain.append(parents[chain[-1]])
        return chain

    holders = map_owners(_snapshot(_gpu(0, 200, 300, 600)), kernel_pids={100: "k1"}, records=[record],
                         paths={}, ancestry=lineage)  # fmt: skip
    assert {h.pid: (h.kernel_id, h.role, h.cluster) for h in holders} == {
        200: ("k1", "worker", "gpu"),
        300: ("k1", "worker", "gpu"),  # started by the worker
        600: ("k1", "child", None),
    }


def test_no_snapshot_or_unreadable_processes() -> None:
    assert map_owners(None, kernel_pids={}, records=[], paths={}) == []
    unreadable = _gpu(0)
    unreadable = GpuReading(**{**unreadable.__dict__, "processes": None})
    assert map_owners(_snapshot(unreadable), kernel_pids={}, records=[], paths={}) == []


def _member(name: str, pid: int, uuid: str, held: int, host: str = "gpu-node-1") -> dict[str, object]:
    gpu = {"index": 0, "nvml_index": 3, "uuid": uuid, "name": "GPU", "label": f"{host} · GPU 3", "process_memory": held}
    return {"name": name, "pid": pid, "host": "10.0.0.5", "host_label": host, "role": "worker", "gpus": [gpu]}


def test_self_reports_join_nvml_rows_on_this_host_and_add_the_others() -> None:
    snapshot = _snapshot(_gpu(0, 300))
    record = ClusterRecord(
        name="gpu", scheduler_address="tcp://x:1", dashboard_url=None, kind="attached", workers=2, pid=100,
        kernel_id="k1", started_at=0.0,
        members=(_member("w-here", 300, "GPU-0", 250), _member("w-far", 77, "GPU-far", 2**30),
                 _member("w-idle", 78, "GPU-far2", 0)),
    )  # fmt: skip
    holders = map_owners(
        snapshot, kernel_pids={100: "k1"}, records=[record], paths={"k1": "a.ipynb"}, ancestry=ancestry
    )
    joined = with_self_reports(holders, [record], {"k1": "a.ipynb"}, snapshot)
    by_pid = {holder.pid: holder for holder in joined}
    assert set(by_pid) == {300, 77}  # a worker holding nothing adds no row
    here = by_pid[300]
    assert (here.source, here.used_memory, here.gpu_label, here.host) == ("nvml+self-report", 300, "GPU 0", None)
    assert here.worker == "w-here" and here.cluster == "gpu"
    far = by_pid[77]
    assert (far.source, far.used_memory, far.host, far.gpu_label) == (
        "self-report",
        2**30,
        "gpu-node-1",
        "gpu-node-1 · GPU 3",
    )
    assert (far.kernel_id, far.path, far.role, far.worker) == ("k1", "a.ipynb", "worker", "w-far")


def test_a_kernel_s_own_record_brings_its_names_to_its_row_and_bad_ones_are_left_out() -> None:
    snapshot = _snapshot(_gpu(0, 100))
    holders = map_owners(snapshot, kernel_pids={100: "k1"}, records=[], paths={"k1": "a.ipynb"}, ancestry=ancestry)
    names = [
        {"name": "x", "what": "CuPy array 10 float64", "bytes": 80, "give_back": "del x"},
        {"name": 3, "bytes": 1},  # not a name
        {"name": "y", "bytes": -1},  # not a size
        {"name": "Out[2]", "bytes": 8},  # what and how missing: said as empty
    ]
    gpu = {"index": 0, "uuid": "GPU-0", "process_memory": 120, "array_memory": 88, "top_names": names}
    kernel = KernelRecord(gpus=(gpu,), pid=100, kernel_id="k1")
    [row] = with_self_reports(holders, [], {"k1": "a.ipynb"}, snapshot, [kernel])
    assert row.role == "kernel" and row.source == "nvml+self-report"
    assert row.top_names == (
        {"name": "x", "what": "CuPy array 10 float64", "bytes": 80, "give_back": "del x"},
        {"name": "Out[2]", "what": "", "bytes": 8, "give_back": ""},
    )
    assert row.to_json()["top_names"][0]["name"] == "x"
    far = KernelRecord(gpus=({**gpu, "uuid": "GPU-far", "top_names": "lots"},), pid=101, kernel_id="k1")
    rows = with_self_reports(holders, [], {"k1": "a.ipynb"}, snapshot, [far])
    assert [row.top_names for row in rows if row.pid == 101] == [()]  # a malformed list: no names
