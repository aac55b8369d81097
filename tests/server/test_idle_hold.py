"""GPU memory held on idle GPUs, for the side panel: the line with the actions that give it back (plain data first),
then ``api/idle-hold`` of a real jupyter-server for a real kernel whose record says it holds memory on an idle
simulated GPU."""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from tornado.httpclient import HTTPResponse

from gpu_magics.cluster.records import record as records
from gpu_magics.server.metrics.holds import Hold, holds
from gpu_magics.server.ownership.kernels import kernel_pids
from tests.server.helpers import delete_kernel
from tests.server.test_metrics import BUSY, IDLE, SPEC, holding, inputs, kernel_record, reading, snapshot

Fetch = Callable[..., Awaitable[HTTPResponse]]
GIB = 2**30


def test_the_line_says_what_is_held_where_for_how_long_and_what_gives_it_back() -> None:
    hold = Hold("k1", 1000.0, 11 * GIB + GIB // 2, 10 * GIB, ("GPU 0", "GPU 1"), "train", "work/a.ipynb")
    assert hold.line(1000.0 + 29 * 60, 30 * 60) is None  # not yet
    assert hold.line(1000.0 + 32 * 60, 30 * 60) == (
        "holds 11.5 GiB on GPU 0, GPU 1, idle for 32 min: free cached memory (%gpucluster free) "
        "or stop the cluster (%gpucluster stop)"
    )
    nothing_cached = Hold("k1", 1000.0, GIB, 0, ("GPU 0",), None, None)
    assert nothing_cached.line(1000.0 + 3 * 3600, 60) == "holds 1.0 GiB on GPU 0, idle for 3.0 h"
    assert Hold("k1", None, GIB, GIB, ("GPU 0",), None, None).line(1e9, 0) is None  # its GPUs work


def test_holds_add_up_a_kernel_s_parts_and_name_the_cluster_it_started() -> None:
    held = [holding("k1", IDLE, GIB, gpu_label="GPU 0", cached_memory=GIB // 2),
            holding("k1", BUSY, 2 * GIB, "workers", gpu_label="GPU 1", cached_memory=GIB),
            holding("k2", IDLE, GIB, gpu_label="GPU 0")]  # fmt: skip
    started = records.ClusterRecord(name="train", scheduler_address="tcp://127.0.0.1:1", dashboard_url=None,
                                    kind="cpu", workers=1, kernel_id="k1")  # fmt: skip
    attached = records.ClusterRecord(name="theirs", scheduler_address="tcp://10.0.0.9:1", dashboard_url=None,
                                     kind="attached", workers=1, kernel_id="k2")  # fmt: skip
    data = inputs(snapshot(reading(0, IDLE), reading(1, BUSY)), *held, records=(started, attached),
                  paths={"k1": "a.ipynb"})  # fmt: skip
    found = holds(data, ["k1", "k2"], {"k1": 900.0, "k2": None})
    assert found == (
        Hold("k1", 900.0, 3 * GIB, GIB + GIB // 2, ("GPU 0", "GPU 1"), "train", "a.ipynb"),
        Hold("k2", None, GIB, 0, ("GPU 0",), None, None),  # not its cluster to stop
    )


@pytest.fixture
def jp_server_config(runtime_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    spec = tmp_path / "gpus.json"
    spec.write_text(json.dumps(SPEC))
    monkeypatch.setenv("GPU_MAGICS_SOURCE", f"fake:{spec}")
    return {
        "ServerApp": {"jpserver_extensions": {"gpu_magics": True}},
        "GpuMagicsServer": {
            "source": "fake",
            "interval": 0.1,
            "metrics_interval": 0.1,
            "idle_hold_warning_min": 0.02,
        },
    }


@pytest.mark.slow
async def test_a_running_kernel_s_memory_on_an_idle_gpu_is_said_in_one_line(jp_fetch: Fetch, jp_serverapp: Any) -> None:
    started = json.loads((await jp_fetch("api", "kernels", method="POST", body=json.dumps({"name": "python3"}))).body)
    try:
        (pid,) = [pid for pid, kernel in kernel_pids(jp_serverapp.kernel_manager).items() if kernel == started["id"]]
        records.write_record(kernel_record(pid, started["id"]))  # as the kernel writes it after a cell
        records.write_record(kernel_record(os.getpid(), "not-this-server-s"))
        deadline = time.monotonic() + 30
        while True:
            reply = json.loads((await jp_fetch("gpu-magics", "api", "idle-hold")).body)
            if (reply["kernels"] and reply["kernels"][0]["line"]) or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.2)
        assert reply["warning_min"] == 0.02
        (kernel,) = reply["kernels"]  # only this server's kernels
        assert kernel["kernel_id"] == started["id"] and kernel["held"] == 3 * GIB and kernel["cached"] == 2 * GIB
        assert kernel["idle_s"] >= 1.2
        assert kernel["line"].startswith("holds 3.0 GiB on GPU 0, idle for ")
        assert kernel["line"].endswith(" s: free cached memory (%gpucluster free)")
    finally:
        await delete_kernel(jp_fetch, started["id"])
