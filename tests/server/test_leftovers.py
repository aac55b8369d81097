"""What kernels that have ended leave on the GPUs: the registry on real processes first (a stand-in kernel and its
children; a pid whose process started at another time than recorded, as a reused pid's does, and another user's
process, both refused), then a real kernel of a real jupyter-server SIGKILLed while the processes it started hold
simulated GPU memory: listed with their bytes and one line per GPU, counted on ``/metrics``, ended on request."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
from jupyter_client.blocking.client import BlockingKernelClient
from tornado.httpclient import HTTPClientError, HTTPResponse

from gpu_magics.monitor import fake_pools
from gpu_magics.monitor.models import GpuProcess, HostReading, Snapshot
from gpu_magics.server.leftovers import store
from gpu_magics.server.leftovers.registry import KernelProcesses, Leftover, Started, process_table, summary
from gpu_magics.server.ownership.kernels import kernel_pids
from tests.server.helpers import delete_kernel
from tests.server.test_metrics import SPEC, reading
from tests.waiting import wait_for

Fetch = Callable[..., Awaitable[HTTPResponse]]
GIB = 2**30
UUID = SPEC["gpus"][0]["uuid"]

# a "kernel": starts a child that starts a grandchild (as a DataLoader's workers), prints their pids, waits
KERNEL = textwrap.dedent(
    """
    import subprocess, sys, time
    child = subprocess.Popen([sys.executable, "-c", "import subprocess, sys, time; "
                              "g = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)']); "
                              "print(g.pid, flush=True); time.sleep(300)"], stdout=subprocess.PIPE, text=True)
    print(child.pid, child.stdout.readline().strip(), flush=True)
    time.sleep(300)
    """
)


@pytest.fixture
def family() -> Iterator[tuple[subprocess.Popen[str], int, int]]:
    """A stand-in kernel with a child and a grandchild; every one of them ended at the end."""
    kernel = subprocess.Popen([sys.executable, "-c", KERNEL], stdout=subprocess.PIPE, text=True)
    assert kernel.stdout is not None
    child, grandchild = (int(pid) for pid in kernel.stdout.readline().split())
    try:
        yield kernel, child, grandchild
    finally:
        for pid in (grandchild, child):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        kernel.kill()
        kernel.wait(10)


def on_gpu(*held: tuple[int, int]) -> Snapshot:
    processes = tuple(GpuProcess(pid, used) for pid, used in held)
    return Snapshot(time.time(), (reading(1, UUID, processes=processes),), HostReading(None, None, None, 1), None)


def test_processes_that_outlive_their_kernel_are_listed_and_ended(
    family: tuple[subprocess.Popen[str], int, int],
) -> None:
    kernel, child, grandchild = family
    registry = KernelProcesses()
    registry.observe({kernel.pid: "k1"})
    assert {entry.pid for entry in registry.recorded()} == {child, grandchild}
    snapshot = on_gpu((child, 3 * GIB), (grandchild, GIB), (os.getpid(), GIB))
    assert registry.leftovers(snapshot) == []  # their kernel runs
    kernel.send_signal(signal.SIGKILL)
    kernel.wait(10)
    registry.observe({})  # the kernel is gone: what it started is kept
    found = registry.leftovers(snapshot)
    assert [(f.pid, f.kernel_id, f.gpu, f.used_memory) for f in found] == sorted(
        [(child, "k1", 1, 3 * GIB), (grandchild, "k1", 1, GIB)]
    )
    assert summary(found) == ["left by a kernel that has ended: 2 processes hold 4.0 GiB on GPU 1"]
    assert registry.leftovers(on_gpu((os.getpid(), GIB))) == []  # no longer on a GPU: not a leftover
    results = registry.end([(child, found[0].started if found[0].pid == child else found[1].started)], found)
    assert [(r.pid, r.ended) for r in results] == [(child, True)]
    assert wait_for(lambda: not psutil.pid_exists(child) or psutil.Process(child).status() == "zombie", 60, "child")
    assert psutil.Process(grandchild).is_running()  # only what was asked for
    registry.observe({})
    assert [f.pid for f in registry.leftovers(snapshot)] == [grandchild]


def test_one_pass_over_proc_reads_what_psutil_reads(family: tuple[subprocess.Popen[str], int, int]) -> None:
    kernel, child, _ = family
    table = process_table()
    for pid in (os.getpid(), kernel.pid, child):
        process = psutil.Process(pid)
        assert table[pid] == (process.ppid(), process.create_time(), process.name())


def test_a_server_that_starts_again_knows_what_the_kernels_of_the_one_before_started(
    family: tuple[subprocess.Popen[str], int, int], runtime_dir: Path
) -> None:
    kernel, child, grandchild = family
    before = KernelProcesses()
    before.observe({kernel.pid: "k1"})
    ended, truncated = (subprocess.Popen([sys.executable, "-c", "pass"]) for _ in range(2))  # servers that have ended
    ended.wait(10)
    truncated.wait(10)
    store.save(before.recorded(), runtime_dir / f"{store.PREFIX}{ended.pid}{store.SUFFIX}")
    (runtime_dir / f"{store.PREFIX}{truncated.pid}{store.SUFFIX}").write_text('{"pid": 2, "proc')
    running = runtime_dir / f"{store.PREFIX}1{store.SUFFIX}"  # pid 1 runs: a server that still runs owns its file
    running.write_text('{"pid": 1, "processes": []}')
    kernel.kill()
    kernel.wait(10)
    after = KernelProcesses()
    after.add(store.load_ended_servers())
    found = after.leftovers(on_gpu((child, 3 * GIB), (grandchild, GIB)))
    assert sorted(f.pid for f in found) == sorted([child, grandchild]) and {f.kernel_id for f in found} == {"k1"}
    assert sorted(runtime_dir.glob(f"{store.PREFIX}*")) == [running]  # the ended servers' files: read once


def test_a_pid_that_names_another_process_now_is_never_signalled() -> None:
    stranger = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
    try:
        started = psutil.Process(stranger.pid).create_time()
        registry = KernelProcesses()
        earlier = started - 30.0  # what the record says: the pid's process then, not this one
        registry._started[(stranger.pid, earlier)] = Started(stranger.pid, earlier, "python", "k1", 2**22 + 1, 1.0)
        listed = [Leftover(stranger.pid, earlier, "python", "k1", 0, UUID, "GPU 0", GIB)]
        (result,) = registry.end([(stranger.pid, earlier)], listed)
        reason = f"pid {stranger.pid} is no longer the process its kernel started"
        assert (result.ended, result.reason) == (False, reason)
        (result,) = registry.end([(stranger.pid, started)], listed)  # its real start time: never recorded
        assert result.reason == f"pid {stranger.pid} is not a process left by a kernel that has ended"
        assert stranger.poll() is None
    finally:
        stranger.kill()
        stranger.wait(10)


@pytest.mark.skipif(os.getuid() != 0, reason="starting another user's process needs root")
def test_another_user_s_process_is_never_signalled() -> None:
    other = subprocess.Popen(["sleep", "300"], user=65534)
    try:
        started = psutil.Process(other.pid).create_time()
        registry = KernelProcesses()
        registry._started[(other.pid, started)] = Started(other.pid, started, "sleep", "k1", 2**22 + 1, 1.0)
        listed = [Leftover(other.pid, started, "sleep", "k1", 0, UUID, "GPU 0", GIB)]
        (result,) = registry.end([(other.pid, started)], listed)
        assert (result.ended, result.reason) == (False, f"pid {other.pid} belongs to another user")
        assert other.poll() is None
    finally:
        other.kill()
        other.wait(10)


# -- a real server and kernel ---------------------------------------------------------------------------


@pytest.fixture
def simulated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The server, its kernels and their children see the same simulated GPUs and pools."""
    spec = tmp_path / "gpus.json"
    spec.write_text(json.dumps(SPEC))
    monkeypatch.setenv("GPU_MAGICS_SOURCE", f"fake:{spec}")
    monkeypatch.setenv(fake_pools.STATE_ENV, str(tmp_path / "fake-state.json"))
    yield spec


@pytest.fixture
def jp_server_config(runtime_dir: Path, simulated: Path) -> dict[str, Any]:
    return {
        "ServerApp": {"jpserver_extensions": {"gpu_magics": True}},
        "GpuMagicsServer": {"source": "fake", "interval": 0.1, "slow_interval": 0.1, "metrics_interval": 0.1},
        # a killed kernel stays dead: jupyter's automatic restart ends the old kernel's process group, the
        # processes it started included, which then race the listing (the restarted kernel is a new one anyway)
        "KernelRestarter": {"restart_limit": 0},
    }


HOLDER = (
    "import sys, time\n"
    "from gpu_magics.monitor.fake_pools import FakePool, device_memory\n"
    "device_memory().hold(sys.argv[1], FakePool(arrays=2 * 2**30, cached=2**30, context=2**29))\n"
    "print('holding', flush=True)\n"
    "time.sleep(300)\n"
)
CELL = f"""
import subprocess, sys
holders = [subprocess.Popen([sys.executable, "-c", {HOLDER!r}, {UUID!r}], stdout=subprocess.PIPE, text=True)
           for _ in range(2)]
print(*[(p.pid, p.stdout.readline().strip()) for p in holders])
"""


def run_cell(client: BlockingKernelClient, code: str) -> str:
    msg_id = client.execute(code)
    text = []
    while True:
        message = client.get_iopub_msg(timeout=60)
        if message["parent_header"].get("msg_id") != msg_id:
            continue
        if message["msg_type"] == "stream":
            text.append(message["content"]["text"])
        elif message["msg_type"] == "error":
            raise AssertionError("\n".join(message["content"]["traceback"]))
        elif message["msg_type"] == "status" and message["content"]["execution_state"] == "idle":
            return "".join(text)


async def get(jp_fetch: Fetch, *path: str) -> Any:
    body = (await jp_fetch("gpu-magics", "api", *path)).body.decode()
    return json.loads(body)


async def until(probe: Callable[[], Awaitable[Any]], timeout: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = await probe()
        if found:
            return found
        await asyncio.sleep(0.2)
    raise AssertionError("timed out")


@pytest.mark.slow
async def test_a_sigkilled_kernel_s_processes_are_listed_counted_and_ended(jp_fetch: Fetch, jp_serverapp: Any) -> None:
    started = json.loads((await jp_fetch("api", "kernels", method="POST", body=json.dumps({"name": "python3"}))).body)
    manager = jp_serverapp.kernel_manager
    kernel = manager.get_kernel(started["id"])
    client = BlockingKernelClient(connection_file=kernel.connection_file)
    client.load_connection_file()
    client.start_channels(hb=False)
    holders: list[int] = []
    try:
        client.wait_for_ready(timeout=90)
        holders = [int(pid) for pid in re.findall(r"\((\d+), 'holding'\)", run_cell(client, CELL))]
        assert len(holders) == 2
        watch = jp_serverapp.web_app.settings["gpu_magics_leftovers"]
        await until(lambda: _recorded(watch, holders))
        (kernel_pid,) = [pid for pid, kernel_id in kernel_pids(manager).items() if kernel_id == started["id"]]
        os.kill(kernel_pid, signal.SIGKILL)  # the kernel dies; what it started keeps its GPU memory
        listed = await until(lambda: _listed(jp_fetch, len(holders)))
        assert sorted(row["pid"] for row in listed["leftovers"]) == sorted(holders)
        assert all(row["kernel_id"] == started["id"] and row["used_memory"] == 3 * GIB + GIB // 2
                   for row in listed["leftovers"])  # fmt: skip
        assert listed["summary"] == ["left by a kernel that has ended: 2 processes hold 7.0 GiB on GPU 0"]
        counted = f'kernel_id="{started["id"]}"}} 2.0'
        text = await until(lambda: _metrics_with(jp_fetch, counted))
        assert 'gpu_magics_leftover_gpu_memory_bytes{Hostname="' in text
        # a pid the server did not list, and bad requests, are refused; the listed ones end
        first = listed["leftovers"][0]
        reply = await _end(jp_fetch, [{"pid": os.getpid(), "started": psutil.Process().create_time()}])
        assert reply["results"][0]["ended"] is False and psutil.Process().is_running()
        for body in ("nope", "{}", '{"processes": [{"pid": -1, "started": 1}]}', '{"processes": [{"pid": 5}]}'):
            with pytest.raises(HTTPClientError) as error:
                await jp_fetch("gpu-magics", "api", "leftovers", "end", method="POST", body=body)
            assert error.value.code == 400
        reply = await _end(jp_fetch, [{"pid": row["pid"], "started": row["started"]} for row in listed["leftovers"]])
        assert sorted((r["pid"], r["ended"]) for r in reply["results"]) == sorted((pid, True) for pid in holders)
        assert first["pid"] in holders
        after = await until(lambda: _listed(jp_fetch, 0, at_most=True))
        assert after["summary"] == []
        gone = await until(lambda: _metrics_without(jp_fetch, "gpu_magics_leftover_processes"))
        assert "gpu_magics_gpu_memory_total_bytes" in gone
    finally:
        client.stop_channels()
        for pid in holders:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        await delete_kernel(jp_fetch, started["id"])


async def _recorded(watch: Any, pids: list[int]) -> bool:
    return set(pids) <= {entry.pid for entry in watch.registry.recorded()}


async def _listed(jp_fetch: Fetch, count: int, at_most: bool = False) -> Any:
    found = await get(jp_fetch, "leftovers")
    size = len(found["leftovers"])
    return found if (size <= count if at_most else size == count) else None


async def _end(jp_fetch: Fetch, processes: list[dict[str, Any]]) -> Any:
    body = json.dumps({"processes": processes})
    return json.loads((await jp_fetch("gpu-magics", "api", "leftovers", "end", method="POST", body=body)).body)


async def _metrics_with(jp_fetch: Fetch, line: str) -> str | None:
    text = (await jp_fetch("metrics")).body.decode()
    return text if any(row.startswith("gpu_magics_leftover_processes{") and row.endswith(line)
                       for row in text.splitlines()) else None  # fmt: skip


async def _metrics_without(jp_fetch: Fetch, name: str) -> str | None:
    text = (await jp_fetch("metrics")).body.decode()
    return text if name not in text else None
