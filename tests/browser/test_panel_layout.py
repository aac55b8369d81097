"""The side panel as a user sees it at the default sidebar width, light and dark: GPU cards that keep their height
while values tick, one-line values, a labelled chart, a cluster with workers on two hosts (from a discovery record),
the Scale dialog's messages and the Restart confirmation; without a GPU, a neutral note with the next step.
Screenshots: test-artifacts/browser/layout-*.png."""

from __future__ import annotations

import json
import os
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from .conftest import HERE, REPO, Lab

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.timeout(600)]

ARTIFACTS = REPO / "test-artifacts" / "browser"
CLUSTER = "multi"
GIB = 1024**3


def _gpu(host: str, index: int, **fields: Any) -> dict[str, Any]:
    return {
        "index": 0, "nvml_index": index, "uuid": f"GPU-{host}-{index}", "name": "NVIDIA H200",
        "label": f"{host} \u00b7 GPU {index}", "memory_total": 140 * GIB, "memory_used": int(67.2 * GIB),
        "gpu_util": 87.0, "process_memory": 4 * GIB, "process_memory_source": "cupy", "error": None, **fields,
    }  # fmt: skip


def _member(name: str, host: str, gpus: list[dict[str, Any]], **fields: Any) -> dict[str, Any]:
    return {
        "name": name, "address": f"tcp://{host}:4{len(name)}123", "host": host, "host_label": host, "pid": 4242,
        "role": "worker", "gpus": gpus, "time": time.time(), **fields,
    }  # fmt: skip


def members_on_two_hosts() -> list[dict[str, Any]]:
    """The kernel and two workers on 127.0.0.1; on 127.0.0.2 a worker whose GPU is lost and one not heard from."""
    return [
        _member("kernel", "127.0.0.1", [], role="kernel"),
        _member("w-0", "127.0.0.1", [_gpu("127.0.0.1", 0, gpu_util=12.0, memory_used=3 * GIB)]),
        # others' memory on w-1's GPU: its note is the longest line of the row
        _member("w-1", "127.0.0.1", [_gpu("127.0.0.1", 1, others={"bytes": 2 * GIB, "pids": []})]),
        _member("w-2", "127.0.0.2", [_gpu("127.0.0.2", 0, error="GPU is lost", gpu_util=None, memory_used=None)]),
        _member("w-3", "127.0.0.2", [], time=None),
    ]


def start_kernel(lab: Lab) -> str:
    """A running kernel of this server, so that the cluster's buttons are enabled."""
    request = urllib.request.Request(
        f"{lab.url}api/kernels?token={lab.token}", data=json.dumps({"name": "python3"}).encode(), method="POST"
    )
    with urllib.request.urlopen(request, timeout=60) as reply:
        kernel_id: str = json.loads(reply.read())["id"]
    return kernel_id


def local_gpu_facts() -> dict[str, object]:
    """What the manager of a GPU cluster started here says of it (it scales, restarts, closes)."""
    from gpu_magics.cluster.managers.local.gpu import LocalGpuManager
    from gpu_magics.cluster.options import parse_cluster_line

    return LocalGpuManager(parse_cluster_line("")).facts("gpu").to_json()


def write_cluster_record(runtime: Path, kernel_id: str) -> Path:
    """A discovery record as a kernel writes it (gpu_magics/cluster/records/record.py), with members on two hosts."""
    runtime.mkdir(parents=True, exist_ok=True, mode=0o700)
    record = {
        "name": CLUSTER, "scheduler_address": "tcp://127.0.0.1:8786", "dashboard_url": "http://127.0.0.1:8787/status",
        "kind": "gpu", "workers": 4, "gpus": ["0", "1", "0", "1"], "pid": os.getpid(), "kernel_id": kernel_id,
        "started_at": time.time(), "version": 5, "members": members_on_two_hosts(), "facts": local_gpu_facts(),
    }  # fmt: skip
    path = runtime / f"gpu-magics-cluster-{os.getpid()}-{CLUSTER}.json"
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w", encoding="utf-8") as file:
        json.dump(record, file)
    return path


def run_layout(lab: Lab, mode: str) -> str:
    result = subprocess.run(
        ["node", str(HERE / "panel_layout.mjs"), lab.url, lab.token, mode],
        env={**os.environ, "ARTIFACTS": str(ARTIFACTS), "CLUSTER_NAME": CLUSTER},
        capture_output=True,
        text=True,
        timeout=540,
    )
    print(result.stdout)
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def test_panel_layout_with_gpus_and_a_cluster_on_two_hosts(lab: Lab) -> None:
    record = write_cluster_record(lab.runtime, start_kernel(lab))
    try:
        output = run_layout(lab, "gpus")
    finally:
        record.unlink(missing_ok=True)
    assert "passed" in output
    for theme in ("light", "dark"):
        for shot in ("cards", "cluster", "scale-error", "panel"):
            assert (ARTIFACTS / f"layout-{shot}-{theme}.png").is_file()


@pytest.fixture
def lab_without_gpu(tmp_path: Path, requirements: None) -> Iterator[Lab]:
    """A JupyterLab whose NVML library is missing, as on a laptop."""
    spec = tmp_path / "no-nvml.json"
    spec.write_text(json.dumps({"init_error": "LibraryNotFound", "gpus": []}))
    server = Lab(tmp_path)
    server.env["GPU_MAGICS_SOURCE"] = f"fake:{spec}"
    try:
        server.start()
        yield server
    finally:
        server.close()


def test_panel_without_gpu_says_what_to_do_next(lab_without_gpu: Lab) -> None:
    output = run_layout(lab_without_gpu, "no-gpu")
    assert "passed" in output
    for theme in ("light", "dark"):
        assert (ARTIFACTS / f"layout-no-gpu-{theme}.png").is_file()
