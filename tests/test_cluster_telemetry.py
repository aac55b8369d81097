"""The kernel's view of the workers' GPU reports (no cluster: reports are fed in as the event handler would)."""

from __future__ import annotations

import threading
import time
from typing import Any

from gpu_magics.cluster.telemetry.collector import ClusterTelemetry
from gpu_magics.cluster.telemetry.reports import ReportedGpu, WorkerReport, host_labels
from tests.waiting import wait_for

GIB = 2**30


def gpu(index: int, nvml_index: int, uuid: str, **values: Any) -> ReportedGpu:
    return ReportedGpu(index=index, nvml_index=nvml_index, uuid=uuid, name="NVIDIA H200", **values)


def report(worker: str, host: str, gpus: tuple[ReportedGpu, ...], *, hostname: str = "node", t: float = 100.0,
           gone: bool = False, interval: float = 1.0) -> WorkerReport:  # fmt: skip
    return WorkerReport(worker=f"tcp://{host}:{worker}", name=worker, host=host, hostname=hostname, pid=1, time=t,
                        interval=interval, gpus=gpus, gone=gone)  # fmt: skip


def telemetry(**kwargs: Any) -> ClusterTelemetry:
    return ClusterTelemetry(None, interval=1.0, local_hostname="jupyter-host", **kwargs)  # type: ignore[arg-type]


def test_dask_cuda_workers_seeing_every_gpu_count_each_once_under_its_worker() -> None:
    seen = telemetry()
    uuids = ["GPU-a", "GPU-b", "GPU-c"]
    for k in range(3):  # dask-cuda rotates CUDA_VISIBLE_DEVICES: worker k computes on GPU k
        order = [(k + j) % 3 for j in range(3)]
        gpus = tuple(gpu(j, order[j], uuids[order[j]]) for j in range(3))
        seen.receive(report(str(k), "10.0.0.5", gpus, hostname="gpu-node-1"), received=100.0)
    members = seen.members(now=100.5)
    assert [[g.label for g in m.gpus] for m in members] == [[f"gpu-node-1 · GPU {k}"] for k in range(3)]
    assert len(seen.gpus(now=100.5)) == 3


def test_the_kernels_own_gpus_keep_its_numbering() -> None:
    seen = telemetry(local_uuids={"GPU-mine": 1})
    seen.receive(report("0", "127.0.0.1", (gpu(0, 5, "GPU-mine"),), hostname="jupyter-host"), received=100.0)
    (only,) = seen.gpus(now=100.0)
    assert only.label == "GPU 1" and only.key == 1


def test_silent_or_leaving_workers_drop_out() -> None:
    seen = telemetry()
    seen.receive(report("a", "127.0.0.2", (gpu(0, 0, "GPU-1"),)), received=100.0)
    seen.receive(report("b", "127.0.0.3", (gpu(0, 0, "GPU-2"),)), received=100.0)
    assert len(seen.gpus(now=102.9)) == 2
    assert [g.host for g in seen.gpus(now=103.5)] == []  # both silent for more than 3 intervals
    seen.receive(report("a", "127.0.0.2", (gpu(0, 0, "GPU-1"),)), received=104.0)
    seen.receive(report("b", "127.0.0.3", (), gone=True), received=104.0)
    assert [g.host for g in seen.gpus(now=104.0)] == ["127.0.0.2"]


def test_hosts_are_named_by_hostname_unless_several_addresses_share_it() -> None:
    reports = [report("a", "10.0.0.1", (), hostname="n1"), report("b", "10.0.0.2", (), hostname="n2")]
    assert host_labels(reports) == {"10.0.0.1": "n1", "10.0.0.2": "n2"}
    reports = [report("a", "127.0.0.2", (), hostname="box"), report("b", "127.0.0.3", (), hostname="box")]
    assert host_labels(reports) == {"127.0.0.2": "127.0.0.2", "127.0.0.3": "127.0.0.3"}


def test_messages_round_trip_and_foreign_ones_are_ignored() -> None:
    original = report("a", "127.0.0.2", (gpu(0, 0, "GPU-1", memory_used=5, process_memory=3, error=None),))
    assert WorkerReport.from_message(original.to_message()) == original
    seen = telemetry()
    seen._on_event((1.0, {"v": 99, "worker": "x"}))
    seen._on_event((1.0, "hello"))
    seen._on_event((1.0, original.to_message()))
    assert seen.ignored == 2 and len(seen.fresh_reports(now=original.time)) == 1


LONG = 600.0  # a report interval: its reports stay fresh for 3 of them, while the test runs, however slowly


def test_the_feed_makes_snapshots_only_while_watched() -> None:
    seen = ClusterTelemetry(None, interval=0.1, local_hostname="jupyter-host")  # type: ignore[arg-type]
    seen.receive(report("a", "127.0.0.2", (gpu(0, 0, "GPU-1", gpu_util=50.0),), t=time.time(), interval=LONG))
    time.sleep(0.3)
    assert seen.history() == []  # nobody watching: reports are kept, no snapshot is made
    got: list[Any] = []
    unsubscribe = seen.subscribe(got.append)
    feed = seen.feed()
    feed.start()
    assert feed.running
    wait_for(lambda: got, 60, "a snapshot")
    assert got and got[0].gpus[0].gpu_util == 50.0 and got[0].gpus[0].label == "node · GPU 0"
    seen.receive(report("a", "127.0.0.2", (gpu(0, 0, "GPU-1", gpu_util=60.0),), t=time.time(), interval=LONG))
    assert feed.tick().gpus[0].gpu_util == 60.0
    unsubscribe()
    feed.stop()
    time.sleep(0.3)
    settled = len(seen.history())
    seen.receive(report("a", "127.0.0.2", (gpu(0, 0, "GPU-1", gpu_util=70.0),), t=time.time(), interval=LONG))
    time.sleep(0.3)
    assert len(seen.history()) == settled and not feed.running
    assert seen.snapshot(now=time.time() + 4 * LONG).status == "no worker has reported its GPUs yet"


def test_a_cells_figures_come_from_the_reports_of_its_own_window() -> None:
    """Workers report every interval, so the report that covers a cell's end comes after it: the figures wait
    for it (bounded), and a reading taken before the cell, or after the next one began, is not in them."""
    from gpu_magics.gpurun.live.cell_monitor import figures_from, within_cell

    # a long interval: the wait for the late report below (1.5 intervals) is a bound its timer never comes near,
    # however busy the machine
    seen = ClusterTelemetry(None, interval=20.0, local_hostname="jupyter-host")  # type: ignore[arg-type]
    seen.receive(report("a", "127.0.0.2", (gpu(0, 0, "GPU-1", gpu_util=95.0),), t=time.time()))  # the last cell's
    feed = seen.feed()
    start = time.time()
    feed.start()
    feed.tick()  # as the cell monitor does at its start
    time.sleep(0.05)  # the cell runs; its workers' next report comes after its end
    end = time.time()
    late = threading.Timer(0.1, lambda: seen.receive(report("a", "127.0.0.2", (gpu(0, 0, "GPU-1", gpu_util=98.0),))))
    late.start()
    feed.settle(end)
    feed.tick()
    late.join()
    figures = figures_from(within_cell(feed.history(since=start), end), "gpu", start)
    (summary,) = figures.gpus
    assert summary.mean_gpu_util == 98.0 and figures.samples == 1
    next_start = time.time()
    feed.tick()
    assert within_cell(feed.history(since=next_start), time.time()) == []  # not the previous cell's 98%
    feed.stop()


def test_waiting_for_reports_is_bounded_and_says_so() -> None:
    seen = ClusterTelemetry(None, interval=600.0, local_hostname="jupyter-host")  # type: ignore[arg-type]
    seen.receive(report("a", "127.0.0.2", (gpu(0, 0, "GPU-1"),), t=time.time(), interval=LONG))
    began = time.monotonic()
    assert not seen.wait_reports_after(time.time(), timeout=0.1)
    # by its timeout (0.1 s), not by its default (1.5 report intervals: 900 s here): a bound far from both
    assert time.monotonic() - began < 120
    assert seen.wait_reports_after(time.time() - 600, timeout=0.1)
    age = seen.reports_age()
    assert age is not None and age < 120  # the report just received


def test_cpu_workers_on_a_host_with_gpus_have_none_of_them() -> None:
    """``--cpu-workers`` on a GPU host: each worker sees the host's GPUs, and none of them is the worker's."""
    host_gpus = (gpu(0, 0, "GPU-a"), gpu(1, 1, "GPU-b"))
    seen = telemetry(cpu_workers=True)
    seen.receive(report("0", "127.0.0.1", host_gpus, hostname="jupyter-host"), received=100.0)
    assert [member.gpus for member in seen.members(now=100.5)] == [()]
    assert seen.gpus(now=100.5) == [] and [gpus for _, gpus in seen.worker_gpus(now=100.5).values()] == [()]
    used = telemetry(cpu_workers=True)  # its process holds memory on one (it used CuPy): it reports what it sees
    used.receive(report("0", "127.0.0.1", (gpu(0, 0, "GPU-a", process_memory=GIB), host_gpus[1])), received=100.0)
    assert len(used.gpus(now=100.5)) == 2
    gpu_workers = telemetry()
    gpu_workers.receive(report("0", "127.0.0.1", host_gpus, hostname="jupyter-host"), received=100.0)
    assert len(gpu_workers.gpus(now=100.5)) == 2
