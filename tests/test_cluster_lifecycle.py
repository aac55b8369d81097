"""``%gpucluster`` with real worker processes (``--cpu-workers``): binding, records, scale, restart, reuse,
replace, stop, attach, killed workers, a killed kernel, bad input. Tests share one cluster where they can."""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import stat
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dask
import psutil
import pytest
from distributed import Client, LocalCluster
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output

import gpu_magics
from gpu_magics import gpus
from gpu_magics.cluster.control import answers, queries, record_writer
from gpu_magics.cluster.control.verbs import stop
from gpu_magics.cluster.records import record as cluster_records
from gpu_magics.magics.gpucluster import ClusterMagics
from gpu_magics.text import hints
from tests.free_ports import free_port
from tests.waiting import wait_for

pytestmark = pytest.mark.slow
REPO = Path(gpu_magics.__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def runtime_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    directory = tmp_path_factory.mktemp("runtime")
    previous = os.environ.get(cluster_records.RUNTIME_DIR_ENV)
    os.environ[cluster_records.RUNTIME_DIR_ENV] = str(directory)
    yield directory
    if previous is None:
        del os.environ[cluster_records.RUNTIME_DIR_ENV]
    else:
        os.environ[cluster_records.RUNTIME_DIR_ENV] = previous


@pytest.fixture(scope="module")
def magics(_session_shell: InteractiveShell, runtime_dir: Path) -> Iterator[ClusterMagics]:
    """A ``ClusterMagics`` on the test shell, not registered, so that a cluster outlives single tests."""
    instance = ClusterMagics(shell=_session_shell)
    yield instance
    instance.close()


def gpucluster(magics: ClusterMagics, line: str) -> tuple[str, str]:
    """Run ``%gpucluster line``; returns (plain text, HTML) of what it displayed or printed."""
    with capture_output() as captured:
        magics.gpucluster(line)
    texts = [output.data.get("text/plain", "") for output in captured.outputs]
    htmls = [output.data.get("text/html", "") for output in captured.outputs]
    return captured.stdout + "\n".join(texts), "\n".join(htmls)


@pytest.fixture
def shared(magics: ClusterMagics) -> Client:
    """The module's 2-worker CPU cluster, started when no test left one running."""
    current = queries.active()
    if current is None or current.name != "shared":
        gpucluster(magics, "--cpu-workers 2 --name shared --replace --client t_client")
    client = queries.require_client()
    if len(client.scheduler_info(n_workers=-1)["workers"]) != 2:
        gpucluster(magics, "scale 2")
    return client


def worker_pids(client: Client) -> dict[str, int]:
    return {address: int(pid) for address, pid in client.run(os.getpid).items()}


def wait_gone(pids: list[int], timeout: float) -> list[int]:
    deadline = time.monotonic() + timeout
    alive = pids
    while alive and time.monotonic() < deadline:
        time.sleep(0.1)
        alive = [
            pid for pid in alive if psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
        ]
    return alive


def records(runtime_dir: Path) -> list[dict[str, Any]]:
    return [json.loads(path.read_text()) for path in sorted(runtime_dir.glob("gpu-magics-cluster-*.json"))]


# -- one shared cluster ----------------------------------------------------------------------------


def test_start_binds_to_localhost_and_shows_workers(
    shared: Client, magics: ClusterMagics, _session_shell: InteractiveShell
) -> None:
    assert queries.active_client() is shared and gpu_magics.client() is shared
    assert _session_shell.user_ns["t_client"] is shared
    info = shared.scheduler_info(n_workers=-1)
    assert info["address"].startswith("tcp://127.0.0.1:")
    assert len(info["workers"]) == 2
    for address, worker in info["workers"].items():
        assert address.startswith("tcp://127.0.0.1:")
        assert worker["nanny"].startswith("tcp://127.0.0.1:")
        assert worker["nthreads"] == 1
    dashboard = answers.dashboard_url()
    assert dashboard is not None and dashboard.startswith("http://127.0.0.1:")
    assert not queries.has_gpu_workers()
    assert queries.describe_hardware() == "2 CPU workers x 1 thread"
    assert queries.gpu_worker_devices(shared) == {}
    # worker processes are children of this process
    children = {child.pid for child in psutil.Process().children(recursive=True)}
    assert set(worker_pids(shared).values()) <= children

    text, html = gpucluster(magics, "status")
    assert "Cluster 'shared': 2 CPU workers x 1 thread, started here" in text
    assert text.count("  running ") == 2 and dashboard in text
    assert f'href="{dashboard}"' in html and "<table" in html
    text, html = gpucluster(magics, "dashboard")
    assert dashboard in text and f'href="{dashboard}"' in html


def test_record_is_private_and_describes_the_cluster(shared: Client, runtime_dir: Path) -> None:
    (path,) = runtime_dir.glob("gpu-magics-cluster-*.json")
    assert path.name == f"gpu-magics-cluster-{os.getpid()}-shared.json"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    (data,) = records(runtime_dir)
    assert data["name"] == "shared" and data["kind"] == "cpu" and data["workers"] == 2
    assert data["scheduler_address"] == shared.scheduler.address
    assert data["dashboard_url"] == answers.dashboard_url()
    assert data["pid"] == os.getpid() and data["kernel_id"] is None and data["gpus"] == []
    assert [r.name for r in cluster_records.list_records()] == ["shared"]


def test_second_start_reuses_with_notice(shared: Client, magics: ClusterMagics) -> None:
    text, _ = gpucluster(magics, "--cpu-workers 3")
    assert "already up; using it (add --replace" in text
    assert queries.require_client() is shared
    assert len(shared.scheduler_info(n_workers=-1)["workers"]) == 2


def test_scale_up_and_down(shared: Client, magics: ClusterMagics, runtime_dir: Path) -> None:
    text, _ = gpucluster(magics, "scale 3")
    assert "scaled 'shared' to 3 worker(s)" in text and text.count("  running ") == 3
    assert len(shared.scheduler_info(n_workers=-1)["workers"]) == 3
    assert records(runtime_dir)[0]["workers"] == 3
    gpucluster(magics, "scale 1")
    assert len(shared.scheduler_info(n_workers=-1)["workers"]) == 1
    assert records(runtime_dir)[0]["workers"] == 1
    assert queries.describe_hardware() == "1 CPU worker x 1 thread"


def test_workers_fork_from_the_prepared_server_and_warm_while_starting(shared: Client) -> None:
    def origin() -> dict[str, Any]:
        import os
        import sys

        import psutil

        return {
            "parent": " ".join(psutil.Process(os.getppid()).cmdline()),
            "preloaded": "gpu_magics.cluster.workers.forkserver_preload" in sys.modules,
            "threads_env": os.environ.get("OMP_NUM_THREADS"),
            "hash_seed": os.environ.get("PYTHONHASHSEED"),
        }

    for seen in shared.run(origin).values():
        assert "multiprocessing.forkserver" in seen["parent"] and seen["preloaded"]
        assert seen["threads_env"] == "1" and seen["hash_seed"] == "6640"  # distributed's pre-spawn environment
    current = queries.active()
    assert current is not None and current.warm_s is not None
    pids = set(worker_pids(shared).values())
    assert {info["pid"] for info in current.devices.values()} == pids
    for info in current.devices.values():
        assert info["process_started_at"] <= info["setup_at"] <= info["warmed_at"]
        assert info["warm_s"] > 0


def test_restart_replaces_worker_processes(shared: Client, magics: ClusterMagics) -> None:
    before = worker_pids(shared)
    text, _ = gpucluster(magics, "restart")
    assert "restarted 'shared'" in text
    after = worker_pids(shared)
    assert len(after) == 2 and not set(before.values()) & set(after.values())
    current = queries.active()
    assert current is not None and {info["pid"] for info in current.devices.values()} == set(after.values())
    assert shared.submit(sum, [1, 2]).result() == 3


def test_killed_worker_is_restarted_and_work_completes(shared: Client, tmp_path: Path) -> None:
    import dask.array as da

    pids = worker_pids(shared)
    go = tmp_path / "tasks-go"

    def held(block: Any) -> Any:  # marks its worker as running a task, then runs until the test lets it end
        (tmp_path / f"running-{os.getpid()}").touch()
        deadline = time.monotonic() + 120
        while not go.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        return block

    x = da.ones((64, 64), chunks=8)
    future = shared.compute((x.map_blocks(held, meta=x._meta) + 1).sum())  # (meta: not called here to find it)
    try:
        running = wait_for(lambda: sorted(tmp_path.glob("running-*")), 120, "a worker running a task")
        victim = int(running[0].name.split("-")[1])
        assert victim in pids.values()
        os.kill(victim, signal.SIGKILL)  # while it runs a task
    finally:
        go.touch()
    assert future.result(timeout=120) == 2 * 64 * 64  # dask re-ran the lost tasks
    shared.wait_for_workers(2, timeout=120)  # the nanny brought a fresh process back
    fresh = wait_for(lambda: len(found := worker_pids(shared)) == 2 and found, 120, "2 workers' pids")
    assert len(fresh) == 2 and victim not in fresh.values()
    assert shared.submit(sum, [2, 3]).result() == 5


def test_replace_starts_a_new_cluster(shared: Client, magics: ClusterMagics, runtime_dir: Path) -> None:
    old_pids = list(worker_pids(shared).values())
    old_address = shared.scheduler.address
    text, _ = gpucluster(magics, "--cpu-workers 1 --name other --replace")
    assert "Cluster 'other': 1 CPU worker x 1 thread" in text
    assert "\nhost  worker" in text  # the start's table has the host column, as status has
    client = queries.require_client()
    assert client is not shared and client.scheduler.address != old_address
    assert wait_gone(old_pids, 15) == []
    assert [r["name"] for r in records(runtime_dir)] == ["other"]


def test_stop_closes_everything(
    shared: Client, magics: ClusterMagics, runtime_dir: Path, _session_shell: InteractiveShell
) -> None:
    pids = list(worker_pids(shared).values())
    text, _ = gpucluster(magics, "stop")
    assert "stopped cluster 'shared'" in text
    assert queries.active_client() is None and "t_client" not in _session_shell.user_ns
    assert wait_gone(pids, 15) == []
    assert records(runtime_dir) == []
    with pytest.raises(UsageError, match="%gpucluster"):
        gpu_magics.client()
    text, _ = gpucluster(magics, "stop")
    assert "no cluster is running" in text
    text, _ = gpucluster(magics, "status")
    assert "no cluster is running" in text


@pytest.mark.parametrize("line", ["scale 2", "restart", "dashboard"])
def test_actions_without_a_cluster_are_usage_errors(magics: ClusterMagics, line: str) -> None:
    stop.stop()
    with pytest.raises(UsageError) as caught:
        magics.gpucluster(line)
    assert "no cluster is running" in str(caught.value) and "\n" not in str(caught.value)


# -- attach ----------------------------------------------------------------------------------------


def test_attach_never_stops_what_it_did_not_start(magics: ClusterMagics, runtime_dir: Path) -> None:
    stop.stop()
    with LocalCluster(
        n_workers=1, threads_per_worker=1, processes=False, protocol="tcp://", dashboard_address=None
    ) as external:
        text, _ = gpucluster(magics, f"--address {external.scheduler_address} --name ext --client t_ext")
        assert "Cluster 'ext': 1 CPU worker x 1 thread (attached), attached, not started here" in text
        assert queries.require_client().submit(sum, [1, 1]).result() == 2
        (data,) = records(runtime_dir)
        assert data["kind"] == "attached" and data["scheduler_address"] == external.scheduler_address
        for line in ("scale 2", "restart"):
            with pytest.raises(UsageError, match="did not start it"):
                magics.gpucluster(line)
        text, _ = gpucluster(magics, "stop")
        assert "disconnected from" in text and "keep running" in text
        assert records(runtime_dir) == []
        with Client(external.scheduler_address, timeout=5) as other:
            assert len(other.scheduler_info(n_workers=-1)["workers"]) == 1
            assert other.submit(sum, [2, 2]).result() == 4


# an attach with --timeout 1 ends within seconds; one that waited for distributed's own connect timeout (set to 600 s
# here) or for a handshake that never comes (forever) would not: a bound far from both, which a busy machine does not
# reach
BOUNDED_S = 120


def test_address_nobody_answers_is_a_quick_usage_error(magics: ClusterMagics, runtime_dir: Path) -> None:
    stop.stop()
    children = {child.pid for child in psutil.Process().children(recursive=True)}
    began = time.monotonic()
    with pytest.raises(UsageError) as caught, dask.config.set({"distributed.comm.timeouts.connect": "600s"}):
        magics.gpucluster(f"--address {(address := f'tcp://127.0.0.1:{free_port()}')} --timeout 1")
    assert time.monotonic() - began < BOUNDED_S
    message = str(caught.value)
    assert message == f"%gpucluster --address {address}: no scheduler answered within 1 s (nothing listens there)"
    assert queries.active() is None and records(runtime_dir) == []
    assert {child.pid for child in psutil.Process().children(recursive=True)} <= children


def test_address_where_a_web_server_answers_is_a_bounded_one_line_error(
    magics: ClusterMagics, runtime_dir: Path
) -> None:
    """distributed waits forever for the handshake of a server that is not Dask's: the line is bounded."""
    import http.server
    import threading

    stop.stop()
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.SimpleHTTPRequestHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    address = f"tcp://127.0.0.1:{server.server_address[1]}"
    try:
        began = time.monotonic()
        with pytest.raises(UsageError) as caught, dask.config.set({"distributed.comm.timeouts.connect": "600s"}):
            magics.gpucluster(f"--address {address} --timeout 1")
        assert time.monotonic() - began < BOUNDED_S
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
    assert str(caught.value) == f"%gpucluster --address {address}: what answered there is not a Dask scheduler"
    assert queries.active() is None and records(runtime_dir) == []


@pytest.mark.skipif(importlib.util.find_spec("cupy") is not None, reason="needs a machine without CuPy")
def test_failed_warm_up_is_a_usage_error_and_leaves_nothing(
    magics: ClusterMagics, runtime_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gpu_magics.cluster.workers import warmup

    stop.stop()
    children = {child.pid for child in psutil.Process().children(recursive=True)}

    def failing(*args: object, **kwargs: object) -> None:
        raise RuntimeError("the workers' warm-up failed\nwith a second line")

    monkeypatch.setattr(warmup.WarmWatch, "wait", failing)  # after the workers started: they must all go
    with pytest.raises(UsageError) as caught:
        magics.gpucluster("--cpu-workers 1 --name broken")
    message = str(caught.value)
    assert "the cluster did not start: RuntimeError: the workers' warm-up failed" in message and "\n" not in message
    assert queries.active() is None and records(runtime_dir) == []
    started = [child.pid for child in psutil.Process().children(recursive=True) if child.pid not in children]
    assert wait_gone(started, 15) == []


# -- GPU checks on a machine without GPUs ----------------------------------------------------------


def test_gpus_out_of_range_names_the_visible_ones(magics: ClusterMagics, monkeypatch: pytest.MonkeyPatch) -> None:
    stop.stop()
    use_gpus(monkeypatch, ["0", "1", "2", "3"])
    with pytest.raises(UsageError) as caught:
        magics.gpucluster("--gpus 7")
    message = str(caught.value)
    assert "no GPU 7 here; the 4 visible GPU(s) are 0, 1, 2, 3" in message and "\n" not in message
    assert queries.active() is None


def test_no_gpu_points_to_cpu_workers(magics: ClusterMagics, monkeypatch: pytest.MonkeyPatch) -> None:
    stop.stop()
    use_gpus(monkeypatch, [])
    with pytest.raises(UsageError) as caught:
        magics.gpucluster("")
    message = str(caught.value)
    assert f"no GPU is visible on this machine; use %gpucluster --cpu-workers {hints.cpu_workers()} " in message
    assert "://" not in message  # nothing the notebook would show as a dead link
    assert queries.active() is None


def test_missing_dask_cuda_is_a_usage_error(magics: ClusterMagics, monkeypatch: pytest.MonkeyPatch) -> None:
    stop.stop()
    use_gpus(monkeypatch, ["0"])
    monkeypatch.setitem(sys.modules, "dask_cuda", None)  # import fails even where it is installed
    with pytest.raises(UsageError, match="dask-cuda is not installed"):
        magics.gpucluster("--gpus 0")
    assert queries.active() is None


def use_gpus(monkeypatch: pytest.MonkeyPatch, cuda_ids: list[str]) -> None:
    """Pretend this machine has real GPUs with these CUDA ids (none: no GPU)."""
    found = [gpus.GpuDevice(i, "NVIDIA H200", 141 * 2**30, cuda_id=cuda_id) for i, cuda_id in enumerate(cuda_ids)]
    monkeypatch.setattr(gpus, "_inventory", gpus.StaticInventory(found))


def test_simulated_gpus_get_one_worker_each(monkeypatch: pytest.MonkeyPatch) -> None:
    """``%gpucluster`` on simulated GPUs: one CPU worker per simulated GPU, which parks through the driver's
    stand-in (``tests/test_parking_settings.py`` starts one); a GPU that is not there is one line."""
    from gpu_magics.cluster.managers.local.simulated import SimulatedGpuManager
    from gpu_magics.cluster.managers.opening import make_manager
    from gpu_magics.cluster.options import parse_cluster_line

    monkeypatch.setattr(gpus, "_inventory", gpus.SourceInventory("fake:4"))
    manager = make_manager(parse_cluster_line(""), {})
    assert isinstance(manager, SimulatedGpuManager)
    manager.open()
    assert manager.expected_workers() == 4 and manager.declared_workers == "cpu"
    with pytest.raises(UsageError, match=r"^%gpucluster --gpus 5: no simulated GPU 5 here; the 4 simulated GPU"):
        make_manager(parse_cluster_line("--gpus 5"), {}).open()


# -- through the extension -------------------------------------------------------------------------


def test_help_is_the_docstring(ip: InteractiveShell) -> None:
    doc = ip.find_line_magic("gpucluster").__doc__
    for option in ("--gpus", "--cpu-workers", "--address", "--replace", "scale N", "--threads-per-worker"):
        assert option in doc


def test_gpurun_multi_gpu_runs_on_cpu_workers_and_unload_stops(ip: InteractiveShell, runtime_dir: Path) -> None:
    stop.stop()
    with capture_output():
        ip.run_line_magic("gpucluster", "--cpu-workers 2 --threads-per-worker 2")
    client = queries.require_client()
    pids = list(worker_pids(client).values())
    cell = (
        "import dask.array as da\n"
        "t_x = da.random.normal(10, 1, size=(400, 400), chunks=100)\n"
        "(t_x + 1)[::2, ::2].mean().compute()\n"
    )
    with capture_output():
        value = ip.run_cell_magic("gpurun", "multi-gpu -o t_result", cell)
    assert value == pytest.approx(11.0, rel=0.01)
    result = ip.user_ns["t_result"]
    assert result.backend == "multi-gpu"
    assert "2 CPU workers x 2 threads" in str(result) and any("no GPU worker" in note for note in result.notes)
    ip.run_line_magic("unload_ext", "gpu_magics")
    try:
        assert queries.active() is None
        assert wait_gone(pids, 15) == []
        assert records(runtime_dir) == []
    finally:
        ip.run_line_magic("load_ext", "gpu_magics")


# -- a killed kernel -------------------------------------------------------------------------------

KERNEL = textwrap.dedent(
    """
    import json, os, sys, time
    from IPython.core.interactiveshell import InteractiveShell
    from IPython.utils.capture import capture_output
    from gpu_magics.cluster.control import answers, queries
    from gpu_magics.cluster.control.verbs import stop

    shell = InteractiveShell.instance()
    shell.run_line_magic("load_ext", "gpu_magics")
    with capture_output():
        shell.run_line_magic("gpucluster", "--cpu-workers 2 --name doomed")
    pids = list(queries.require_client().run(os.getpid).values())
    print(json.dumps(pids), flush=True)
    time.sleep(120)
    """
)


def test_sigkilled_kernel_leaves_no_worker_processes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
        cluster_records.RUNTIME_DIR_ENV: str(tmp_path),
    }
    kernel = subprocess.Popen([sys.executable, "-c", KERNEL], stdout=subprocess.PIPE, text=True, env=env, cwd=tmp_path)
    try:
        assert kernel.stdout is not None
        line = kernel.stdout.readline()
        pids = json.loads(line)
        assert len(pids) == 2 and all(psutil.pid_exists(pid) for pid in pids)
        assert len(list(tmp_path.glob("gpu-magics-cluster-*-doomed.json"))) == 1
        os.kill(kernel.pid, signal.SIGKILL)
        kernel.wait(timeout=10)
        assert wait_gone(pids, 15) == []
    finally:
        if kernel.poll() is None:
            kernel.kill()
    monkeypatch.setenv(cluster_records.RUNTIME_DIR_ENV, str(tmp_path))
    assert cluster_records.list_records() == []  # the dead kernel's record is cleaned up
    assert list(tmp_path.glob("gpu-magics-cluster-*.json")) == []


def test_an_unwritable_runtime_dir_is_said_once(
    magics: ClusterMagics, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    monkeypatch.setenv(cluster_records.RUNTIME_DIR_ENV, str(blocker / "runtime"))
    monkeypatch.setattr(record_writer, "_warned", False)
    stop.stop()
    try:
        magics.gpucluster("--cpu-workers 1 --name unlisted")
        magics.gpucluster("scale 2")
        err = capsys.readouterr().err
    finally:
        stop.stop()
    assert err.count("side panel will not list this cluster") == 1
    assert "gpu_magics" not in err and "\n" not in err.strip()


@pytest.mark.parametrize(
    "compute",
    [
        "dask.delayed(lambda: t_lock.locked())().compute()",
        # a reduction: its chunk tasks run in one task per worker, materialized in the kernel (kernel_tail)
        "da.ones((400, 400), chunks=40).map_blocks(lambda b: b * t_lock.locked()).sum().compute()",
    ],
)
def test_a_cell_holding_an_unpicklable_object_names_it_in_one_line(
    shared: Client, _session_shell: InteractiveShell, capfd: pytest.CaptureFixture[str], compute: str
) -> None:
    ip = _session_shell
    ip.run_line_magic("load_ext", "gpu_magics")
    try:
        cell = f"import threading, dask, dask.array as da\nt_lock = threading.Lock()\n{compute}"
        outcome = ip.run_cell(f"%%gpurun multi-gpu --no-monitor -q\n{cell}")
        err = capfd.readouterr().err
    finally:
        ip.run_line_magic("unload_ext", "gpu_magics")
    assert not outcome.success and isinstance(outcome.error_in_exec, TypeError)
    lines = [line for line in err.splitlines() if line.strip() and "INFO" not in line]
    assert lines == [
        "TypeError: a task of this cell holds a _thread.lock object, which cannot be sent to the workers; "
        "make it inside the task, or pass the data it holds instead"
    ]


def test_an_adaptive_cluster_at_zero_workers_takes_a_cell_and_grows_for_it(
    magics: ClusterMagics, _session_shell: InteractiveShell
) -> None:
    """After ``adapt 0 2`` took the cluster to no workers, a ``%%gpurun multi-gpu`` cell runs (its tasks make the
    cluster start workers; it says so) and ``status`` says workers start when tasks wait, not "scale N"."""
    stop.stop()
    gpucluster(magics, "--cpu-workers 1 --name t-adapt")
    try:
        gpucluster(magics, "adapt 0 2")
        client = queries.require_client()
        deadline = time.monotonic() + 60
        while client.scheduler_info(n_workers=-1)["workers"]:
            assert time.monotonic() < deadline, "adapt did not give its idle worker back"
            time.sleep(0.5)
        text, _ = gpucluster(magics, "status")
        assert "the cluster has no workers: it adapts between 0 and 2: workers start when tasks wait" in text
        _session_shell.run_line_magic("load_ext", "gpu_magics")
        try:
            with capture_output() as captured:
                result = _session_shell.run_cell(
                    "%%gpurun multi-gpu\nimport dask.array as da\nint(da.ones(100, chunks=10).sum().compute())"
                )
        finally:
            _session_shell.run_line_magic("unload_ext", "gpu_magics")
        shown = captured.stdout + "\n".join(output.data.get("text/plain", "") for output in captured.outputs)
        assert result.success, shown + captured.stderr
        assert result.result == 100
        assert "it adapts up to 2, and the cell waits as they start" in shown
    finally:
        stop.stop()
