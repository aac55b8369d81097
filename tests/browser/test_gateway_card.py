"""A gateway cluster a notebook connected to (``%gpucluster --gateway --connect NAME``), in real JupyterLab in
headless Chromium, light and dark: its card (a hand-built ``ClusterInfo``, as the gateway's start time and the
connection give it) and its side-panel row (a discovery record, as the kernel writes it) name it by its short
name and tell its own age, not the connection's. Screenshots: ``test-artifacts/browser/gateway-*.png``. The
same fields from a real gateway: ``tests/test_gateway.py``."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from .conftest import HERE, REPO, Lab
from .test_panel_layout import start_kernel

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.timeout(600)]

KERNEL = {"name": "python3", "display_name": "Python 3", "language": "python"}
NAME = "5b4e57c3"  # gateway_short_name("5b4e57c3f8a1429b9d4a7e0c2f6b8d1e")
FACTS = {
    "owned": False, "ends": "detach", "scalable": True, "restartable": False,
    "source": "from Dask Gateway, not made here", "taken": "connected at", "title": "Dask Gateway", "workers": "cpu",
}  # fmt: skip  # what GatewayManager.facts() says of a cluster connected to
CARD = f"""import time
from gpu_magics.cluster.info import ClusterFacts, ClusterInfo, WorkerInfo
from gpu_magics.display.cluster_view import ClusterView

now = time.time()
workers = tuple(
    WorkerInfo(address=f"tls://10.0.0.{{i}}:8786", name=f"dask-worker-{{i}}", status="running", threads=2)
    for i in range(2)
)
ClusterView(ClusterInfo(
    name={NAME!r}, kind="gateway", scheduler_address="gateway://gw.example.org:443/5b4e57c3f8a1429b9d4a7e0c2f6b8d1e",
    dashboard_url=None, hardware="2 CPU workers x 2 threads", workers=workers, ready_s=1.2, started_at=now - 2,
    up_since=now - 7200, manager="Dask Gateway", facts=ClusterFacts(**{FACTS!r}),
))"""


def write_record(runtime: Path, kernel_id: str) -> Path:
    """The record a kernel writes for a gateway cluster it connected to 2 s ago, which the gateway started 2 h ago."""
    runtime.mkdir(parents=True, exist_ok=True, mode=0o700)
    now = time.time()
    record = {
        "name": NAME, "scheduler_address": "gateway://gw.example.org:443/5b4e57c3f8a1429b9d4a7e0c2f6b8d1e",
        "dashboard_url": None, "kind": "gateway", "workers": 2, "gpus": [], "pid": os.getpid(),
        "kernel_id": kernel_id, "started_at": now - 2, "version": 5, "members": [], "manager": "Dask Gateway",
        "up_since": now - 7200, "facts": FACTS,
    }  # fmt: skip
    path = runtime / f"gpu-magics-cluster-{os.getpid()}-{NAME}.json"
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w", encoding="utf-8") as file:
        json.dump(record, file)
    return path


def test_a_connected_gateway_cluster_reads_by_its_short_name_and_own_age(lab: Lab) -> None:
    import subprocess

    notebook = lab.root / "gateway-card.ipynb"
    cell = {"cell_type": "code", "metadata": {}, "source": CARD, "outputs": [], "execution_count": None}
    notebook.write_text(
        json.dumps({"cells": [cell], "metadata": {"kernelspec": KERNEL}, "nbformat": 4, "nbformat_minor": 5}), "utf-8"
    )
    record = write_record(lab.runtime, start_kernel(lab))
    try:
        result = subprocess.run(
            ["node", str(HERE / "gateway_card.mjs"), lab.url, lab.token, notebook.name],
            env={**os.environ, "ARTIFACTS": str(REPO / "test-artifacts" / "browser"), "CLUSTER_NAME": NAME},
            capture_output=True,
            text=True,
            timeout=540,
        )
    finally:
        record.unlink(missing_ok=True)
    print(result.stdout)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "reads by its short name and its own age" in result.stdout
