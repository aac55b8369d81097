"""GPU memory by notebook on a shared server, from a real jupyter-server on simulated GPUs: a kernel's own report
(arrays, cached, context) joined with NVML's row for it; the GPUs that others use (by NVML's pids where they can be
compared, else the memory in use that no process of the user's explains); the kernels that can free what they cache.
The judgement itself (``monitor.availability.other_use``) is checked on plain numbers first."""

from __future__ import annotations

import json
import os
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from tornado.httpclient import AsyncHTTPClient, HTTPClientError, HTTPResponse

from gpu_magics.cluster.records import record as records
from gpu_magics.monitor import fake_pools
from gpu_magics.monitor.availability import CONTEXT_GUESS, OtherUse, other_use
from gpu_magics.monitor.fake_pools import FakeDeviceMemory, FakePool
from tests.server.helpers import delete_kernel

Fetch = Callable[..., Awaitable[HTTPResponse]]
SHARED = Path(__file__).parent.parent / "data" / "shared_gpus.json"
GIB = 2**30
UUIDS = [f"GPU-5a4e0000-0000-0000-0000-00000000000{i}" for i in range(4)]


# -- the judgement ---------------------------------------------------------------------------------


def test_others_named_by_nvml_where_its_pids_are_ours_to_compare() -> None:
    assert other_use(50 * GIB, 140 * GIB, [(7, 10 * GIB), (4242, 40 * GIB)], {7: 10 * GIB}) == OtherUse(
        40 * GIB, (4242,), "nvml"
    )
    assert other_use(10 * GIB, 140 * GIB, [(7, 10 * GIB)], {7: 10 * GIB}) is None  # all ours
    assert other_use(GIB, 140 * GIB, [(4242, None)], {}) == OtherUse(0, (4242,), "nvml", unknown=1)
    assert other_use(GIB, 140 * GIB, [(4242, 2**20)], {}) is None  # a process starting: too little to count


def test_in_a_container_nvml_pids_are_not_compared_and_memory_is() -> None:
    """NVML gives the host's pids there: none is ours although we hold memory, so only the totals speak."""
    listed = [(91234, 11 * GIB), (95555, 40 * GIB)]
    assert other_use(51 * GIB, 140 * GIB, listed, {7: 11 * GIB}) == OtherUse(40 * GIB, (), "unexplained")
    assert other_use(12 * GIB, 140 * GIB, listed[:1], {7: 11 * GIB}) is None  # 1 GiB: the driver's share
    # a pool's figure leaves its context out: each such process is allowed one
    assert other_use(11 * GIB + CONTEXT_GUESS, 140 * GIB, None, {7: 10 * GIB}, unknown_contexts=1) is None
    four = OtherUse(4 * GIB, (), "unexplained")
    assert other_use(14 * GIB, 140 * GIB, None, {7: 10 * GIB}, unknown_contexts=1) == four
    assert other_use(None, None, None, {}) is None


def test_unexplained_memory_counts_on_a_small_mig_instance() -> None:
    assert other_use(2 * GIB, 5 * GIB, None, {}) == OtherUse(2 * GIB, (), "unexplained")
    assert other_use(GIB // 4, 5 * GIB, None, {}) is None


# -- a real server ---------------------------------------------------------------------------------


@pytest.fixture
def shared_server(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, runtime_dir: Path) -> Iterator[FakeDeviceMemory]:
    """The server reads the shared spec; this process holds a pool on GPU 1 as a kernel would (the state file)."""
    monkeypatch.setenv("GPU_MAGICS_SOURCE", f"fake:{SHARED}")
    state = tmp_path / "fake-state.json"
    monkeypatch.setenv(fake_pools.STATE_ENV, str(state))
    memory = FakeDeviceMemory(state)
    memory.hold(UUIDS[1], FakePool(arrays=GIB, cached=10 * GIB, context=GIB // 2))
    yield memory
    memory.release()


@pytest.fixture  # type: ignore[no-redef]
def jp_server_config(runtime_dir: Path, shared_server: FakeDeviceMemory) -> dict[str, Any]:
    return {
        "ServerApp": {"jpserver_extensions": {"gpu_magics": True}},
        "GpuMagicsServer": {"source": "fake", "interval": 0.1, "slow_interval": 0.1, "history": 50},
    }


def kernel_record(kernel_id: str) -> records.KernelRecord:
    gpu = {"index": 1, "uuid": UUIDS[1], "name": "NVIDIA H200", "label": "GPU 1", "memory_total": 150754820096,
           "process_memory": 11 * GIB + GIB // 2, "process_memory_source": "cupy", "array_memory": GIB,
           "cached_memory": 10 * GIB, "context_memory": GIB // 2}  # fmt: skip
    return records.KernelRecord(gpus=(gpu,), kernel_id=kernel_id)


async def processes(jp_fetch: Fetch, until: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
    import asyncio

    for _ in range(100):
        reply = json.loads((await jp_fetch("gpu-magics", "api", "processes")).body.decode())
        if until(reply):
            return reply
        await asyncio.sleep(0.1)
    raise AssertionError(f"the processes reply never became what was waited for: {reply}")


async def test_a_kernel_s_report_joins_nvml_s_row_and_others_are_marked(jp_fetch: Fetch) -> None:
    records.write_record(kernel_record("k-elsewhere"))
    reply = await processes(jp_fetch, lambda r: len(r["others"]) == 2 and any(p["pid"] == 4242 for p in r["processes"]))
    (mine,) = reply["elsewhere"]  # the user's (not others' work), though not this server's: apart
    assert os.getpid() not in {h["pid"] for h in reply["processes"]}
    assert mine["pid"] == os.getpid() and mine["gpu_uuid"] == UUIDS[1] and mine["source"] == "nvml+self-report"
    assert mine["role"] == "kernel" and mine["kernel_id"] == "k-elsewhere"
    assert (mine["array_memory"], mine["cached_memory"], mine["context_memory"]) == (GIB, 10 * GIB, GIB // 2)
    assert mine["used_memory"] == 11 * GIB + GIB // 2  # NVML's figure: all the process holds
    stranger = next(h for h in reply["processes"] if h["pid"] == 4242)
    assert stranger["role"] == "other" and stranger["cached_memory"] is None
    others = {use["gpu"]: use for use in reply["others"]}
    assert others[0] == {"gpu": 0, "gpu_uuid": UUIDS[0], "gpu_label": "GPU 0", "bytes": 42412802048,
                         "pids": [4242], "how": "nvml", "unknown": 0}  # fmt: skip
    assert others[2]["how"] == "unexplained" and others[2]["bytes"] == 20 * GIB and others[2]["pids"] == []
    assert reply["reporting_kernels"] == []  # its kernel is not one of this server's: no Free cached here


async def test_without_its_report_this_kernel_would_look_like_a_stranger(jp_fetch: Fetch) -> None:
    reply = await processes(jp_fetch, lambda r: any(p["pid"] == os.getpid() for p in r["processes"]))
    mine = next(h for h in reply["processes"] if h["pid"] == os.getpid())
    assert mine["role"] == "other" and mine["source"] == "nvml"
    assert {use["gpu"] for use in reply["others"]} == {0, 1, 2}


@pytest.mark.slow
async def test_a_running_kernel_that_reports_can_free_its_cache(jp_fetch: Fetch) -> None:
    started = json.loads((await jp_fetch("api", "kernels", method="POST", body=json.dumps({"name": "python3"}))).body)
    try:
        records.write_record(kernel_record(started["id"]))
        reply = await processes(jp_fetch, lambda r: bool(r["reporting_kernels"]))
        assert reply["reporting_kernels"] == [started["id"]]
    finally:
        await delete_kernel(jp_fetch, started["id"])


async def test_processes_without_a_token_is_refused(
    jp_serverapp: Any, http_server_client: Any, jp_base_url: str
) -> None:
    """What others run, and which kernels can free memory, is for the logged-in user only."""
    url = f"http://127.0.0.1:{jp_serverapp.port}{jp_base_url}gpu-magics/api/processes"
    with pytest.raises(HTTPClientError) as error:
        await AsyncHTTPClient().fetch(url)
    assert error.value.code == 403


async def test_a_gone_kernel_s_report_is_ignored_and_pruned_only_by_post(jp_fetch: Fetch, runtime_dir: Path) -> None:
    gone = records.KernelRecord(gpus=kernel_record("k-gone").gpus, pid=2**22 + 12345, kernel_id="k-gone")
    records.write_record(gone)
    reply = await processes(jp_fetch, lambda r: any(p["pid"] == os.getpid() for p in r["processes"]))
    assert all(h["kernel_id"] != "k-gone" for h in reply["processes"])
    assert [path.name for path in runtime_dir.glob("gpu-magics-kernel-*.json")] == [gone.filename]  # GET reads only
    await jp_fetch("gpu-magics", "api", "clusters", "prune", method="POST", body="{}")
    assert list(runtime_dir.glob("gpu-magics-kernel-*.json")) == []


async def test_a_kernel_s_own_total_is_its_row_s_figure(jp_fetch: Fetch) -> None:
    """Its record is newer than NVML's last list (read every few seconds): just after Free cached, say what it says."""
    freed = dict(kernel_record("k-freed").gpus[0], process_memory=GIB + GIB // 2, cached_memory=0)
    records.write_record(records.KernelRecord(gpus=(freed,), kernel_id="k-freed"))
    reply = await processes(jp_fetch, lambda r: any(p["source"] == "nvml+self-report" for p in r["elsewhere"]))
    mine = next(h for h in reply["elsewhere"] if h["pid"] == os.getpid())
    assert (mine["used_memory"], mine["cached_memory"], mine["source"]) == (GIB + GIB // 2, 0, "nvml+self-report")
