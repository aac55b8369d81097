"""The REST endpoints on a real jupyter-server: data, validation, and that none answers without a token."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from tornado.httpclient import AsyncHTTPClient, HTTPClientError, HTTPResponse

from gpu_magics.cluster.records import record as cluster_records
from gpu_magics.text import hints

Fetch = Callable[..., Awaitable[HTTPResponse]]

GET_ROUTES = ("devices", "history", "clusters", "processes", "leftovers", "idle-hold")
POST_ROUTES = ("clusters/prune", "leftovers/end")


def body(response: HTTPResponse) -> Any:
    return json.loads(response.body.decode())


async def test_devices_reports_fake_gpus(jp_fetch: Fetch) -> None:
    data = body(await jp_fetch("gpu-magics", "api", "devices"))
    assert data["config"] == {
        "interval": 100,
        "slow_interval": 2000,
        "history": 50,
        "source": "fake",
        "cpu_cluster": hints.cpu_cluster_command(),  # the panel's hints: the same N as the kernels'
        "gpu_packages": hints.gpu_packages_installed(),
    }
    gpus = data["snapshot"]["gpus"]
    assert [gpu["index"] for gpu in gpus] == [0, 1]
    assert gpus[0]["name"] == "NVIDIA H200"
    assert data["snapshot"]["status"] is None


async def test_history_grows_and_filters(jp_fetch: Fetch) -> None:
    await jp_fetch("gpu-magics", "api", "devices")
    deadline = time.monotonic() + 5
    snapshots: list[dict[str, Any]] = []
    while time.monotonic() < deadline and len(snapshots) < 3:
        snapshots = body(await jp_fetch("gpu-magics", "api", "history"))["snapshots"]
    assert len(snapshots) >= 3
    times = [s["time"] for s in snapshots]
    assert times == sorted(times)
    newer = body(await jp_fetch("gpu-magics", "api", "history", params={"since": times[-2]}))["snapshots"]
    assert all(s["time"] > times[-2] for s in newer)
    one = body(await jp_fetch("gpu-magics", "api", "history", params={"limit": "1"}))["snapshots"]
    assert len(one) == 1


@pytest.mark.parametrize("params", [{"since": "soon"}, {"since": "nan"}, {"limit": "-1"}, {"limit": "1.5"}])
async def test_history_rejects_bad_queries(jp_fetch: Fetch, params: dict[str, str]) -> None:
    with pytest.raises(HTTPClientError) as error:
        await jp_fetch("gpu-magics", "api", "history", params=params)
    assert error.value.code == 400


def _record(**overrides: Any) -> cluster_records.ClusterRecord:
    values: dict[str, Any] = {
        "name": "cpu",
        "scheduler_address": "tcp://127.0.0.1:8786",
        "dashboard_url": "http://127.0.0.1:8787/status",
        "kind": "cpu",
        "workers": 2,
        "pid": os.getpid(),
        "kernel_id": "k-1",
        "started_at": time.time(),
    }
    values.update(overrides)
    return cluster_records.ClusterRecord(**values)


async def test_a_cluster_of_a_kernel_this_server_does_not_run_is_only_elsewhere(
    jp_fetch: Fetch, runtime_dir: Path
) -> None:
    cluster_records.write_record(_record(connection_file="kernel-k-1.json", host="node-7"))
    reply = body(await jp_fetch("gpu-magics", "api", "clusters"))
    assert reply["clusters"] == []
    (elsewhere,) = reply["elsewhere"]
    assert (elsewhere["name"], elsewhere["kernel_id"], elsewhere["pid"]) == ("cpu", "k-1", os.getpid())
    assert (elsewhere["connection_file"], elsewhere["host"]) == ("kernel-k-1.json", "node-7")


async def test_prune_removes_stale_records_and_get_does_not(jp_fetch: Fetch, runtime_dir: Path) -> None:
    cluster_records.write_record(_record(name="gone", pid=2**22 + 12345, started_at=time.time()))
    assert len(list(runtime_dir.iterdir())) == 1
    assert body(await jp_fetch("gpu-magics", "api", "clusters"))["clusters"] == []
    assert len(list(runtime_dir.iterdir())) == 1  # a GET changes nothing
    pruned = body(await jp_fetch("gpu-magics", "api", "clusters", "prune", method="POST", body="{}"))
    assert pruned["clusters"] == [] and pruned["elsewhere"] == []
    assert list(runtime_dir.iterdir()) == []


async def test_processes_lists_gpu_holders(jp_fetch: Fetch) -> None:
    await jp_fetch("gpu-magics", "api", "devices")
    deadline = time.monotonic() + 10
    data: dict[str, Any] = {}
    while time.monotonic() < deadline:
        data = body(await jp_fetch("gpu-magics", "api", "processes"))
        if data["processes"]:
            break
    assert {p["gpu"] for p in data["processes"]} == {0, 1}
    assert all(p["role"] == "other" and p["kernel_id"] is None for p in data["processes"])


@pytest.mark.parametrize("route", GET_ROUTES)
async def test_get_without_token_is_refused(
    jp_serverapp: Any, http_server_client: Any, jp_base_url: str, route: str
) -> None:
    url = f"http://127.0.0.1:{jp_serverapp.port}{jp_base_url}gpu-magics/api/{route}"
    with pytest.raises(HTTPClientError) as error:
        await AsyncHTTPClient().fetch(url)
    assert error.value.code == 403


@pytest.mark.parametrize("route", POST_ROUTES)
async def test_post_without_token_is_refused(
    jp_serverapp: Any, http_server_client: Any, jp_base_url: str, route: str
) -> None:
    url = f"http://127.0.0.1:{jp_serverapp.port}{jp_base_url}gpu-magics/api/{route}"
    with pytest.raises(HTTPClientError) as error:
        await AsyncHTTPClient().fetch(url, method="POST", body="{}")
    assert error.value.code == 403


@pytest.mark.parametrize("route", GET_ROUTES)
async def test_wrong_token_is_refused(jp_fetch: Fetch, route: str) -> None:
    with pytest.raises(HTTPClientError) as error:
        await jp_fetch("gpu-magics", "api", *route.split("/"), headers={"Authorization": "token wrong"})
    assert error.value.code == 403
