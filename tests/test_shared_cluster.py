"""A cluster on a shared GPU server, with real worker processes on simulated GPUs (``--cpu-workers`` whose plugin
reads the fake spec): what each worker and the kernel hold three ways (arrays, cached, context) in
``%gpucluster status`` and the record, GPUs busy with others' work marked, ``%gpucluster free`` on the workers, and
the idle timeout that closes a cluster started here and only detaches from an attached one. A process the kernel
started that holds memory on the busy GPU is the kernel's, as ``/metrics`` counts it (``part="children"``), never
"work that is not this cluster's or this kernel's".

The spec is ``tests/data/shared_gpus.json`` with its GPU 1 first: the GPU every CPU worker computes on (its index 0)
is the one where the workers and the kernel hold their pools; the next one is busy with another user's job (pid
4242). Pools are shared through a fake state file, as a device is one for every process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
from distributed import Client, LocalCluster
from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output
from traitlets import TraitError

from gpu_magics import gpus
from gpu_magics.cluster.control import answers, queries
from gpu_magics.cluster.control.verbs import stop
from gpu_magics.cluster.info import WorkerGpu
from gpu_magics.cluster.records import kernel_report
from gpu_magics.cluster.records import record as cluster_records
from gpu_magics.cluster.telemetry.plugin import GpuTelemetry
from gpu_magics.cluster.workers import forkserver
from gpu_magics.display.cluster_view import ClusterView
from gpu_magics.magics.gpucluster import ClusterMagics
from gpu_magics.monitor import fake_pools
from gpu_magics.monitor.sampler import shutdown_sampler
from tests.waiting import wait_for

pytestmark = pytest.mark.slow

SHARED = Path(__file__).parent / "data" / "shared_gpus.json"
GIB = 2**30
POOLED, BUSY = "GPU-5a4e0000-0000-0000-0000-000000000001", "GPU-5a4e0000-0000-0000-0000-000000000000"
CHILD_HOLDS = 256 * 2**20


@pytest.fixture(scope="module")
def environment(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The kernel and its workers on the shared server (its pooled GPU first); returns the runtime dir."""
    directory = tmp_path_factory.mktemp("shared")
    spec = json.loads(SHARED.read_text())
    spec["gpus"] = [spec["gpus"][1], spec["gpus"][0], *spec["gpus"][2:]]
    # a process this kernel started holds memory on the busy GPU too: the kernel's own, not others' work
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    spec["gpus"][1]["processes"].append({"pid": child.pid, "used_memory": CHILD_HOLDS})
    (directory / "spec.json").write_text(json.dumps(spec))
    settings = {
        "GPU_MAGICS_SOURCE": f"fake:{directory / 'spec.json'}",
        "GPU_MAGICS_RUNTIME_DIR": str(directory / "runtime"),
        fake_pools.STATE_ENV: str(directory / "fake-state.json"),
    }
    saved = {name: os.environ.get(name) for name in settings}
    os.environ.update(settings)
    # workers fork from a server that keeps the environment it started with: start one with these settings
    forkserver.stop_server()
    shutdown_sampler()
    previous = gpus.set_inventory(None)
    try:
        yield directory / "runtime"
    finally:
        child.kill()
        child.wait(10)
        stop.stop()
        forkserver.stop_server()
        fake_pools.device_memory().release()
        kernel_report.remove()
        shutdown_sampler()
        gpus.set_inventory(previous)
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


@pytest.fixture(scope="module")
def magics(_session_shell: InteractiveShell, environment: Path) -> Iterator[ClusterMagics]:
    instance = ClusterMagics(shell=_session_shell)
    instance.telemetry_interval = 0.5
    yield instance
    instance.close()


def gpucluster(magics: ClusterMagics, line: str) -> tuple[str, str]:
    with capture_output() as captured:
        magics.gpucluster(line)
    texts = [output.data.get("text/plain", "") for output in captured.outputs]
    htmls = [output.data.get("text/html", "") for output in captured.outputs]
    return captured.stdout + "\n".join(texts), "\n".join(htmls)


@pytest.fixture
def shared(magics: ClusterMagics) -> Client:
    """Two CPU workers on the simulated GPUs, reporting every 0.5 s."""
    current = queries.active()
    if current is None or current.name != "shared":
        gpucluster(magics, "--cpu-workers 2 --name shared --replace")
    return queries.require_client()


def printed(capsys: pytest.CaptureFixture[str], words: str, timeout: float) -> str:
    """What was printed, once it says ``words`` (the idle watcher prints from its own thread)."""
    seen: list[str] = []

    def said() -> bool:
        seen.append(capsys.readouterr().out)
        return words in "".join(seen)

    wait_for(said, timeout, f"a line saying {words!r}")
    return "".join(seen)


def gpu_of(uuid: str) -> Any:
    """The GPU ``uuid`` as ``%gpucluster status`` shows it (an empty stand-in before the workers' first report)."""
    found = (gpu for worker in answers.status().workers for gpu in worker.gpus if gpu.uuid == uuid)
    return next(found, WorkerGpu(label="", name="", uuid=uuid))


def test_status_shows_the_three_figures_and_the_gpu_others_use(shared: Client, magics: ClusterMagics) -> None:
    pooled = wait_for(lambda: (g := gpu_of(POOLED)).cached_memory and g.context_memory is not None and g, 30,
                      "a worker's pool and context in its report")  # fmt: skip
    assert (pooled.array_memory, pooled.cached_memory, pooled.context_memory) == (2 * GIB, 6 * GIB, GIB // 2)
    assert pooled.others_memory is None  # the workers and the kernel hold all of it
    busy = wait_for(lambda: (g := gpu_of(BUSY)).others_pids and g, 30, "NVML's list of processes on the busy GPU")
    assert busy.others_pids == (4242,) and busy.others_memory == 42412802048  # the kernel's child is not others'
    text, html = gpucluster(magics, "status")
    header = next(line for line in text.splitlines() if line.startswith("host"))
    assert header.split()[:10] == ["host", "worker", "GPU", "util", "memory", "worker", "holds", "arrays", "cached",
                                   "context"]  # fmt: skip
    assert "GPU 1 · NVIDIA H200 [others]" in text
    assert "GPU 1: busy with work that is not this cluster's or this kernel's: pid 4242 holds 39.5 GiB" in text
    assert "this kernel holds on GPU 0: arrays 1.0 GiB · cached 10.0 GiB · context 512 MiB (%gpucluster free" in text
    assert 'class="gpu-magics-others"' in html and 'title="pid 4242 holds 39.5 GiB"' in html


def test_the_record_carries_the_three_figures_others_and_the_kernel(shared: Client, environment: Path) -> None:
    def complete() -> Any:
        for record in cluster_records.list_records(clean=False):
            gpus_of = [gpu for member in record.members for gpu in member["gpus"]]
            if any(g["others"] and g["others"]["pids"] for g in gpus_of) and any(
                g["cached_memory"] for g in gpus_of if g["uuid"] == POOLED
            ):
                return record
        return None

    record = wait_for(complete, 30, "a record with pools and others")
    assert record.idle_timeout is None and record.idle_since is None
    kernel = next(member for member in record.members if member["role"] == "kernel")
    [held] = kernel["gpus"]
    assert (held["array_memory"], held["cached_memory"], held["context_memory"]) == (GIB, 10 * GIB, GIB // 2)
    busy = next(g for m in record.members for g in m["gpus"] if g["uuid"] == BUSY)
    assert busy["others"] == {"bytes": 42412802048, "pids": [4242], "how": "nvml", "unknown": 0}
    json.dumps(record.to_json())


def test_free_gives_the_workers_and_the_kernel_s_cache_back(shared: Client, magics: ClusterMagics) -> None:
    wait_for(lambda: gpu_of(POOLED).cached_memory, 30, "the workers' pools")
    text, _ = gpucluster(magics, "free workers")
    assert text.strip() == "%gpucluster free: 2 workers gave back 12.0 GiB"
    wait_for(lambda: gpu_of(POOLED).cached_memory == 0, 60, "the workers' reports after freeing")
    text, _ = gpucluster(magics, "free")
    assert text.strip() == "%gpucluster free: this kernel gave back 10.0 GiB; 2 workers gave back 0 B"
    assert kernel_report.kernel_memory(fresh=True)[0].held.cached == 0


# -- the idle timeout ------------------------------------------------------------------------------


def test_an_idle_cluster_started_here_closes_and_says_so(
    magics: ClusterMagics, environment: Path, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Started with an hour's timeout (nothing closes while the test looks at it idle), then given 3 s while a task
    runs: the task keeps it open past the timeout; once the task ends, it closes after 3 s and says so."""
    text, _ = gpucluster(magics, "--cpu-workers 1 --name idle --replace --idle-timeout 1h")
    assert "closes after 1 h without a task" in text
    client = queries.require_client()
    pids = [int(pid) for pid in client.run(os.getpid).values()]
    [record] = cluster_records.list_records(clean=False)
    assert record.idle_timeout == 3600.0
    wait_for(lambda: (c := queries.active()) is not None and c.idle is not None and c.idle.idle_since, 60, "idle")
    text = ClusterView(answers.status()).text()  # not captured: the line it prints on closing must not be
    assert "closes after 1 h without a task · idle now: " in text and " left" in text
    began, go = tmp_path / "task-began", tmp_path / "task-go"

    def held(began: Path, go: Path) -> None:
        began.touch()
        deadline = time.monotonic() + 120
        while not go.exists() and time.monotonic() < deadline:
            time.sleep(0.05)

    future = client.submit(held, began, go, pure=False)
    try:
        wait_for(began.exists, 120, "the task running")
        text, _ = gpucluster(magics, "--idle-timeout 3s")
        assert "closes after 3 s without a task" in text
        wait_for(lambda: [r.idle_timeout for r in cluster_records.list_records(clean=False)] == [3.0], 30, "record")
        time.sleep(4.0)  # longer than the timeout, while the task runs (until the test lets it end): it stays open
        assert queries.active() is not None and queries.active().name == "idle"  # type: ignore[union-attr]
        info = answers.status()
        assert info.idle_timeout == 3.0 and info.idle_left is None
    finally:
        go.touch()
    future.result(timeout=60)
    said = printed(capsys, "closed cluster", 60)  # once the cluster has closed
    closed = "%gpucluster: closed cluster 'idle' after 3 s without a task (--idle-timeout); its workers have ended"
    assert closed in said  # CPU workers: no GPUs to free
    assert queries.active() is None
    assert cluster_records.list_records(clean=False) == []
    gone = wait_for(lambda: not any(psutil.pid_exists(pid) for pid in pids), 60, "the worker to exit")
    assert gone


def test_the_idle_timeout_is_a_config_default_and_can_be_changed(magics: ClusterMagics, environment: Path) -> None:
    with pytest.raises(TraitError, match=r"idle_timeout: invalid duration '30': use a number and a unit"):
        magics.idle_timeout = "30"
    magics.idle_timeout = "30m"
    try:
        text, _ = gpucluster(magics, "--cpu-workers 1 --name idle --replace")
        assert "closes after 30 min without a task" in text
        text, _ = gpucluster(magics, "--idle-timeout 2h")
        assert "already up; using it, with the new idle timeout" in text and "closes after 2 h without" in text
        wait_for(lambda: any(r.idle_timeout == 7200 for r in cluster_records.list_records(clean=False)), 60, "record")
        text, _ = gpucluster(magics, "--idle-timeout off")
        assert "without a task" not in text
    finally:
        magics.idle_timeout = "off"
        stop.stop()


def test_an_attached_cluster_is_only_detached(magics: ClusterMagics, capsys: pytest.CaptureFixture[str]) -> None:
    stop.stop()
    with LocalCluster(
        n_workers=1, threads_per_worker=1, processes=False, protocol="tcp://", dashboard_address=None
    ) as external:
        text, _ = gpucluster(magics, f"--address {external.scheduler_address} --name ext --idle-timeout 2s")
        assert "detaches after 2 s without a task" in text
        said = printed(capsys, "detached from", 20)
        assert queries.active() is None
        assert f"%gpucluster: detached from {external.scheduler_address} after 2 s without a task" in said
        assert "its scheduler and workers keep running" in said
        with Client(external.scheduler_address, timeout=5) as other:
            assert other.submit(sum, [2, 2]).result() == 4
    assert threading.active_count() < 200


def test_reports_after_a_moment_are_asked_for_not_waited_for(shared: Client, magics: ClusterMagics) -> None:
    """With reports every 60 s, a status (or a cell's end) still gets figures from after it: the workers are
    asked to report at once rather than waited for until their next interval."""
    telemetry = queries.telemetry()
    assert telemetry is not None
    wait_for(lambda: len(telemetry.fresh_reports()) == 2, 30, "both workers' first reports")
    telemetry.client.register_plugin(GpuTelemetry(60.0))  # the workers now report once a minute
    try:
        wait_for(
            lambda: [report.interval for report, _ in telemetry.fresh_reports()] == [60.0, 60.0],
            30,
            "both workers' first report at the new interval",
        )
        assert telemetry.wait_reports_after(time.time(), timeout=60)
    finally:
        telemetry.client.register_plugin(GpuTelemetry(telemetry.interval))
