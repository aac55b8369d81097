"""``GpuMagicsServer.idle_reclaim_min``: a real jupyter-server (subprocess) on simulated GPUs that sit idle, real
kernels it started, each with a one-worker cluster whose worker holds simulated GPU memory. With the setting on
(0.02 min), the server has a kernel give back its cached memory and close its cluster where nothing of the user's
lives there (the next cell says so, ``/metrics`` counts it, the kernel and its variables stay), and leaves a
cluster that keeps a persisted collection (the line says why; the collection still computes). Off by default:
nothing happens. Bad values are refused in one line. Every process is ended by its pid at the end."""

from __future__ import annotations

import asyncio
import json
import math
import re
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
from jupyter_server.services.kernels.kernelmanager import AsyncMappingKernelManager
from traitlets import TraitError
from traitlets.config import Config

from gpu_magics.cluster.control.verbs.reclaim import said
from gpu_magics.monitor import fake_pools
from gpu_magics.server.config import GpuMagicsServer
from gpu_magics.server.metrics.holds import Hold
from gpu_magics.server.reclaim.kernel_call import KernelCallError, evaluate
from gpu_magics.server.reclaim.reclaimer import ACTIONS, due, expression
from tests.prometheus.harness import JupyterServer, ServerKernel, require_prometheus

GIB = 2**30
ARTIFACTS = Path(__file__).resolve().parents[1] / "test-artifacts" / "idle-reclaim"  # the README quotes them
SPEC = {
    "gpus": [
        {"name": "NVIDIA H200", "uuid": "GPU-7ec1a000-0000-0000-0000-000000000000", "memory_total": 150 * GIB,
         "memory_used": GIB, "gpu_util": 0, "processes": [],
         "pools": {"kernel": {"arrays": GIB, "cached": 10 * GIB, "context": GIB // 2},
                   "worker": {"arrays": 2 * GIB, "cached": 6 * GIB, "context": GIB // 2}}},
        {"name": "NVIDIA H200", "uuid": "GPU-7ec1a000-0000-0000-0000-000000000001", "memory_total": 150 * GIB,
         "memory_used": 0, "gpu_util": 0, "processes": []},
    ]
}  # fmt: skip
SETUP = (
    "%load_ext gpu_magics\n%config ClusterMagics.telemetry_interval = 0.5\n"
    "%config ClusterMagics.wait_for_workers = True\n"
)
PIDS = (  # the reclaim comes between cells: what a test needs of the cluster is asked for in the cell that starts it
    "\nimport json, os\nfrom gpu_magics.cluster.control.queries import active_client\n"
    "print('worker pids:', json.dumps(list(active_client().run(os.getpid).values())))"
)
LINE = re.compile(r"%gpucluster: idle GPUs for \d+ s: the server \(GpuMagicsServer\.idle_reclaim_min\) (.+)")


# -- plain data: what is due, what is said, the setting ----------------------------------------------------------


def test_a_hold_is_due_once_per_idle_stretch_and_only_with_something_to_give_back() -> None:
    cached = Hold("k1", 100.0, 3 * GIB, GIB, ("GPU 0",), None, None)
    cluster = Hold("k2", 100.0, GIB, 0, ("GPU 0",), "c", None)
    nothing = Hold("k3", 100.0, GIB, 0, ("GPU 0",), None, None)  # a context and arrays only: nothing to free
    busy = Hold("k4", None, GIB, GIB, ("GPU 0",), "c", None)
    holds = [cached, cluster, nothing, busy]
    assert due(holds, {"k1", "k2", "k3", "k4"}, 60, 159.0, {}) == []  # not yet
    assert due(holds, {"k1", "k2", "k3", "k4"}, 60, 160.0, {}) == [cached, cluster]
    assert due(holds, {"k2"}, 60, 160.0, {}) == [cluster]  # a kernel the server no longer runs
    assert due(holds, {"k1", "k2"}, 60, 160.0, {"k1": 100.0}) == [cluster]  # this stretch was acted on
    assert due(holds, {"k1", "k2"}, 60, 160.0, {"k1": 50.0}) == [cached, cluster]  # an earlier one was


def test_the_line_says_what_was_given_back_and_what_was_kept() -> None:
    stopped = said(1800, 10 * GIB, "train", True, None)
    assert stopped == (
        "%gpucluster: idle GPUs for 30 min: the server (GpuMagicsServer.idle_reclaim_min) gave back 10.0 GiB of "
        "cached GPU memory and closed cluster 'train', which held none of your data; start a new one with %gpucluster"
    )
    kept = said(3600, 0, "train", False, "it is running tasks")
    assert kept == (
        "%gpucluster: idle GPUs for 1 h: the server (GpuMagicsServer.idle_reclaim_min) left cluster 'train' "
        "running: it is running tasks"
    )
    assert said(60, 0, None, False, None) is None  # nothing done: nothing said
    call = "__import__('gpu_magics.cluster.control.verbs.reclaim', fromlist=['run']).run("
    assert expression(72.5).startswith(call)


def test_the_setting_is_off_by_default_and_bad_values_are_refused_in_one_line() -> None:
    assert GpuMagicsServer().idle_reclaim_min == 0
    config = Config()
    config.GpuMagicsServer.idle_reclaim_min = 0.02  # fractions of a minute
    assert GpuMagicsServer(config=config).idle_reclaim_min == 0.02
    for bad in (-1, math.nan, math.inf):
        config.GpuMagicsServer.idle_reclaim_min = bad
        with pytest.raises(TraitError) as raised:
            GpuMagicsServer(config=config)
        message = str(raised.value)
        assert message.startswith("idle_reclaim_min must be a number of minutes >= 0 (0 turns it off, e.g. 60)")
        assert "\n" not in message
    config.GpuMagicsServer.idle_reclaim_min = "soon"
    with pytest.raises(TraitError, match="idle_reclaim_min"):
        GpuMagicsServer(config=config)


# -- asking a real kernel, as the server does -----------------------------------------------------------------


async def _cell(kernel: Any, code: str) -> None:
    """Run ``code`` as a notebook's cell would (a request that is not silent)."""
    client = kernel.client()
    client.start_channels(iopub=False, stdin=False, hb=False, control=False)
    try:
        msg_id = client.execute(code)
        while (await client.get_shell_msg(timeout=60))["parent_header"].get("msg_id") != msg_id:
            pass
    finally:
        client.stop_channels()


async def _ask_a_kernel() -> tuple[Any, ...]:
    manager = AsyncMappingKernelManager()
    kernel_id = await manager.start_kernel(kernel_name="python3")
    try:
        kernel: Any = manager.get_kernel(kernel_id)
        await _cell(kernel, "x = 41")
        await asyncio.sleep(0.5)  # the server's watch has read the cell's last status
        before = kernel.last_activity
        answer = await evaluate(manager, kernel_id, "{'x': x + 1, 'cells': len(In)}", 60)
        again = await evaluate(manager, kernel_id, "{'x': x + 1, 'cells': len(In)}", 60)
        after = kernel.last_activity
        with pytest.raises(KernelCallError) as failed:
            await evaluate(manager, kernel_id, "1 / 0", 60)
        await _cell(kernel, "x = 0")
        return answer, again, before, after, str(failed.value), kernel.last_activity
    finally:
        await manager.shutdown_kernel(kernel_id)


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_the_kernel_answers_between_cells_out_of_its_history_and_the_culler_s_clock() -> None:
    answer, again, before, after, failed, later = asyncio.run(_ask_a_kernel())
    assert answer == again == {"x": 42, "cells": 2}  # In[0] and the one cell: the requests are not in the history
    assert after == before  # the server's requests are not the user's activity
    assert failed == "ZeroDivisionError: division by zero"
    assert later > before  # a cell is


# -- a real server, real kernels -------------------------------------------------------------------------------


class Kernel(ServerKernel):
    """A kernel the server started, with the extension and a cluster when the test asks."""

    def start_cluster(self, line: str) -> list[int]:
        """Load the extension, start a cluster with ``line`` (and more code, in the same cell): its workers' pids."""
        text = self.run(f"{SETUP}%gpucluster {line}{PIDS}")
        (found,) = re.findall(r"worker pids: (\[.*\])", text)
        return [int(pid) for pid in json.loads(found)]


def serve(directory: Path, *options: str) -> JupyterServer:
    (directory / "spec.json").write_text(json.dumps(SPEC))
    env = {
        "GPU_MAGICS_SOURCE": f"fake:{directory / 'spec.json'}",
        "GPU_MAGICS_RUNTIME_DIR": str(directory / "gpu-magics-runtime"),
        fake_pools.STATE_ENV: str(directory / "fake-state.json"),
    }
    server = JupyterServer(directory, env, "--GpuMagicsServer.interval=0.25",
                           "--GpuMagicsServer.metrics_interval=0.25", *options)  # fmt: skip
    server.start()
    return server


@pytest.fixture(scope="module")
def reclaiming(tmp_path_factory: pytest.TempPathFactory) -> Iterator[JupyterServer]:
    server = serve(tmp_path_factory.mktemp("reclaim"), "--GpuMagicsServer.idle_reclaim_min=0.02")
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def kernel(reclaiming: JupyterServer) -> Iterator[Kernel]:
    started = Kernel(reclaiming)
    try:
        yield started
    finally:
        started.stop()


def counts(server: JupyterServer) -> dict[str, float]:
    """``gpu_magics_idle_reclaims_total`` by action, from a scrape of ``/metrics``."""
    text = server.api("GET", "metrics")
    found = re.findall(r'^gpu_magics_idle_reclaims_total\{action="(\w+)"\} (\S+)$', text, re.MULTILINE)
    return {action: float(value) for action, value in found}


def wait_for(check: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.25)
    raise AssertionError(f"timed out waiting for {what}")


def keep(name: str, text: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    (ARTIFACTS / name).write_text(text)


def pools_of(directory: Path, pid: int) -> list[dict[str, int]]:
    state = json.loads((directory / "fake-state.json").read_text())
    return [pools[str(pid)] for pools in state.values() if str(pid) in pools]


@pytest.mark.slow
def test_the_counter_is_there_from_the_start_and_promtool_finds_nothing_to_say(reclaiming: JupyterServer) -> None:
    _, promtool = require_prometheus()
    text = reclaiming.api("GET", "metrics")
    ours = "".join(line + "\n" for line in text.splitlines() if "gpu_magics_idle_reclaims" in line)
    assert ours.startswith("# HELP gpu_magics_idle_reclaims_total ")
    assert "# TYPE gpu_magics_idle_reclaims_total counter\n" in ours
    assert set(counts(reclaiming)) == set(ACTIONS)  # every action has its series, 0 until it happens
    checked = subprocess.run([promtool, "check", "metrics"], input=ours, capture_output=True, text=True, timeout=60)
    assert (checked.returncode, checked.stdout + checked.stderr) == (0, "")


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_an_idle_cluster_is_closed_and_cached_memory_freed_and_the_notebook_says_so(
    reclaiming: JupyterServer, kernel: Kernel
) -> None:
    before = counts(reclaiming)
    assert set(before) == {"freed_cache", "stopped_cluster", "parked_cluster", "kept_cluster", "failed"}
    workers = kernel.start_cluster("--cpu-workers 1 --name reclaim\nkeep = 41")
    wait_for(lambda: counts(reclaiming)["stopped_cluster"] > before["stopped_cluster"], 90, "the cluster to close")
    after = counts(reclaiming)
    assert after["freed_cache"] == before["freed_cache"] + 1 and after["failed"] == before["failed"]
    assert kernel.running()  # never the kernel
    text = kernel.run("print(keep + 1)")
    said_lines = [found for line in text.splitlines() if (found := LINE.fullmatch(line))]
    assert len(said_lines) == 1, text
    assert said_lines[0].group(1) == (
        "gave back 10.0 GiB of cached GPU memory and closed cluster 'reclaim', which held none of your data; "
        "start a new one with %gpucluster"
    )
    assert text.splitlines()[-1] == "42"  # the variable is there
    keep("stopped.txt", said_lines[0].group(0) + "\n")
    logged = f"gpu_magics: kernel {kernel.id} (no notebook): {said_lines[0].group(0)}"
    wait_for(lambda: logged in reclaiming.log.read_text(), 60, "the server's log to say it")
    assert "idle_reclaim_min" not in kernel.run("print('again')")  # said once
    assert "no cluster is running" in kernel.run("%gpucluster stop")
    wait_for(lambda: not any(psutil.pid_exists(pid) for pid in workers), 30, "the worker to exit")
    # the kernel's pool gave back its cache; it keeps its arrays and context
    directory = reclaiming.directory
    kernel_pid = int(kernel.run("import os; print(os.getpid())").strip().splitlines()[-1])
    assert pools_of(directory, kernel_pid) == [{"arrays": GIB, "cached": 0, "context": GIB // 2}]


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_cluster_that_keeps_a_persisted_collection_stays_and_the_line_says_why(
    reclaiming: JupyterServer, kernel: Kernel
) -> None:
    before = counts(reclaiming)
    (worker,) = kernel.start_cluster("--cpu-workers 1 --name keep\nimport dask.array as da\n"
                                     "x = da.arange(10, chunks=5).persist()")  # fmt: skip
    wait_for(lambda: counts(reclaiming)["kept_cluster"] > before["kept_cluster"], 90, "the reclaim")
    after = counts(reclaiming)
    assert after["stopped_cluster"] == before["stopped_cluster"] and after["failed"] == before["failed"]
    assert after["freed_cache"] == before["freed_cache"] + 1
    text = kernel.run("print(int(x.sum().compute()))")
    said_lines = [found for line in text.splitlines() if (found := LINE.fullmatch(line))]
    assert len(said_lines) == 1, text
    assert said_lines[0].group(1) == (
        "gave back 16.0 GiB of cached GPU memory and left cluster 'keep' running: it keeps 2 pieces of data "
        "(persisted collections, futures); close it with %gpucluster stop"
    )
    assert text.splitlines()[-1] == "45"  # nothing lost
    keep("kept.txt", said_lines[0].group(0) + "\n")
    scrape = reclaiming.api("GET", "metrics")
    keep("metrics.txt", "".join(line + "\n" for line in scrape.splitlines() if "gpu_magics_idle_reclaims" in line))
    assert "'keep'" in kernel.run("%gpucluster status") and psutil.pid_exists(worker)
    assert pools_of(reclaiming.directory, worker) == [{"arrays": 2 * GIB, "cached": 0, "context": GIB // 2}]


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_off_by_default_nothing_is_done(tmp_path: Path) -> None:
    server = serve(tmp_path)
    try:
        kernel = Kernel(server)
        try:
            (worker,) = kernel.start_cluster("--cpu-workers 1 --name stays")
            query = re.compile(rf'^gpu_magics_kernel_idle_hold_seconds\{{kernel_id="{kernel.id}"\}} (\S+)$', re.M)

            def held_idle() -> bool:
                found = query.search(server.api("GET", "metrics"))
                return found is not None and float(found.group(1)) > 5 * 0.02 * 60  # five times the test's setting

            wait_for(held_idle, 90, "the memory to sit idle")
            assert "gpu_magics_idle_reclaims" not in server.api("GET", "metrics")
            text = kernel.run("%gpucluster status")
            assert "'stays'" in text and "idle_reclaim_min" not in text and psutil.pid_exists(worker)
        finally:
            kernel.stop()
    finally:
        server.stop()
