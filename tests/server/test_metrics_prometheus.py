"""``/metrics`` as a real Prometheus scrapes it (Debian's package, ``tests/prometheus/setup.sh``): a jupyter-server
subprocess on simulated GPUs, a real kernel it started with a cluster (one CPU worker reading the simulated GPUs), a
stand-in for dcgm-exporter as a second target, and queries through Prometheus's HTTP API: the kernel's bytes equal
what ``%gpucluster status`` shows, the join ``on(UUID)`` with ``DCGM_FI_DEV_FB_USED`` gives one row per GPU, the
queries of ``docs/how-to/prometheus.md`` and of the Grafana dashboard answer, a stopped kernel's series leave, a
wrong token is refused and ``promtool check metrics`` finds nothing to say. Every process is ended by its pid at
the end."""

from __future__ import annotations

import json
import re
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from gpu_magics.monitor import fake_pools
from tests.prometheus.harness import DcgmStandin, JupyterServer, Prometheus, ServerKernel, require_prometheus

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

REPO = Path(__file__).resolve().parents[2]
SHARED = REPO / "tests" / "data" / "shared_gpus.json"
DASHBOARD = REPO / "docs" / "grafana" / "gpu-magics.json"
PAGE = REPO / "docs" / "how-to" / "prometheus.md"  # the admins' page
MIB = 2**20


@dataclass
class Stack:
    server: JupyterServer
    prometheus: Prometheus
    promtool: str
    uuids: list[str]


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    binary, promtool = require_prometheus()
    directory = tmp_path_factory.mktemp("prometheus")
    spec = json.loads(SHARED.read_text())
    spec["gpus"] = [spec["gpus"][1], spec["gpus"][0], *spec["gpus"][2:]]  # the pooled GPU first: the CPU worker's
    (directory / "spec.json").write_text(json.dumps(spec))
    env = {
        "GPU_MAGICS_SOURCE": f"fake:{directory / 'spec.json'}",
        "GPU_MAGICS_RUNTIME_DIR": str(directory / "gpu-magics-runtime"),
        fake_pools.STATE_ENV: str(directory / "fake-state.json"),
    }
    server = JupyterServer(
        directory,
        env,
        "--GpuMagicsServer.interval=0.25",
        "--GpuMagicsServer.metrics_interval=0.5",
        "--GpuMagicsServer.memory_cap=64MiB",  # the kernels hold more: the page's query for notebooks near their cap
    )
    uuids = [gpu["uuid"] for gpu in spec["gpus"]]
    dcgm = DcgmStandin(
        [(index, gpu["uuid"], gpu["name"], gpu["memory_used"] // MIB) for index, gpu in enumerate(spec["gpus"])],
        hostname="gpu-node-1",
    )
    jobs = [
        {"job_name": "jupyter", "static_configs": [{"targets": [server.address]}],
         "authorization": {"credentials": server.token}},
        {"job_name": "jupyter-wrong-token", "static_configs": [{"targets": [server.address]}],
         "authorization": {"credentials": "not-the-token"}},
        {"job_name": "dcgm", "static_configs": [{"targets": [dcgm.address]}]},
    ]  # fmt: skip
    prometheus = Prometheus(binary, directory, jobs)
    try:
        server.start()
        prometheus.start()
        yield Stack(server, prometheus, promtool, uuids)
    finally:
        prometheus.stop()
        server.stop()
        dcgm.stop()


Kernel = ServerKernel


@pytest.fixture(scope="module")
def kernels(stack: Stack) -> Iterator[tuple[Kernel, Kernel]]:
    """A kernel with a one-worker cluster (both hold memory on the first GPU) and one that never reports."""
    silent = Kernel(stack.server)
    kernel = Kernel(stack.server)
    try:
        kernel.run("%load_ext gpu_magics\n%config ClusterMagics.telemetry_interval = 0.5\n"
                   "%config ClusterMagics.wait_for_workers = True")  # fmt: skip
        kernel.run("%gpucluster --cpu-workers 1 --name metrics --idle-timeout 30m")
        yield kernel, silent
    finally:
        kernel.stop()
        silent.stop()


STATUS = """
import json
from gpu_magics import gpus
from gpu_magics.cluster.control import answers
info = answers.status()
uuid_of = {f"GPU {device.index}": device.uuid for device in gpus.inventory().devices()}
print(json.dumps({
    "workers": {g.uuid: g.process_memory for w in info.workers for g in w.gpus if g.process_memory},
    "kernel": {uuid_of[g.label]: g.process_memory for g in info.kernel_gpus if g.process_memory},
}))
"""


def by_part(result: list[dict[str, Any]]) -> dict[tuple[str, str], float]:
    return {(row["metric"]["UUID"], row["metric"]["part"]): float(row["value"][1]) for row in result}


def test_a_kernel_s_bytes_are_what_gpucluster_status_shows(stack: Stack, kernels: tuple[Kernel, Kernel]) -> None:
    kernel, silent = kernels
    query = f'gpu_magics_kernel_gpu_memory_bytes{{kernel_id="{kernel.id}"}}'
    stack.prometheus.wait_for(query, lambda rows: {part for _, part in by_part(rows)} == {"kernel", "workers"})
    # both settle once the worker's report carries NVML's figure for its process (read every few seconds)
    deadline, shown, got = time.monotonic() + 60, {}, {}
    while time.monotonic() < deadline:
        shown = json.loads(kernel.run(STATUS).strip().splitlines()[-1])
        expected = {(uuid, "kernel"): float(held) for uuid, held in shown["kernel"].items()}
        expected.update({(uuid, "workers"): float(held) for uuid, held in shown["workers"].items()})
        got = by_part(stack.prometheus.query(query))
        if got == expected and shown["kernel"] and shown["workers"]:
            break
        time.sleep(1)
    assert got == expected, (got, shown)
    assert "this kernel holds on GPU 0" in kernel.run("%gpucluster status")
    # the cluster: one worker, started here, with an idle clock; the kernel that never loaded the extension: nothing
    rows = stack.prometheus.query(f'gpu_magics_cluster_info{{kernel_id="{kernel.id}"}}')
    assert [(r["metric"]["cluster"], r["metric"]["kind"], r["metric"]["started_here"]) for r in rows] == [
        ("metrics", "cpu", "true")
    ]
    workers = stack.prometheus.query(f'gpu_magics_cluster_workers{{kernel_id="{kernel.id}"}}')
    assert [float(row["value"][1]) for row in workers] == [1.0]
    assert stack.prometheus.query(f'gpu_magics_cluster_idle_seconds{{kernel_id="{kernel.id}"}}')
    assert stack.prometheus.query(f'{{__name__=~"gpu_magics_.+", kernel_id="{silent.id}"}}') == []


def test_the_join_on_uuid_with_dcgm_exporter_gives_one_row_per_gpu(stack: Stack) -> None:
    query = "gpu_magics_gpu_memory_used_bytes / on(UUID) (DCGM_FI_DEV_FB_USED * 1048576)"
    rows = stack.prometheus.wait_for(query, lambda rows: len(rows) == len(stack.uuids))
    assert sorted(row["metric"]["UUID"] for row in rows) == sorted(stack.uuids)


def documented_queries() -> list[str]:
    """The PromQL of the admins' page (its ```promql blocks, one query a line)."""
    text = PAGE.read_text(encoding="utf-8")
    return [line for block in re.findall(r"```promql\n(.*?)```", text, re.S) for line in block.splitlines()
            if line.strip() and not line.startswith("#")]  # fmt: skip


def dashboard_queries() -> list[str]:
    panels = json.loads(DASHBOARD.read_text(encoding="utf-8"))["panels"]
    return [target["expr"] for panel in panels for target in panel.get("targets", ())]


LABELS = {"__name__", "kernel_id", "notebook", "UUID", "Hostname", "modelName", "gpu", "part", "cluster", "kind",
          "started_here", "instance", "job", "pod", "namespace"}  # fmt: skip


def test_the_documented_and_the_dashboard_s_queries_answer(stack: Stack, kernels: tuple[Kernel, Kernel]) -> None:
    kernel, _ = kernels
    stack.prometheus.wait_for("gpu_magics_kernel_idle_hold_seconds", lambda rows: rows)
    queries = documented_queries() + dashboard_queries()
    assert len(queries) >= 6
    for query in queries:
        # every filter opened up, and the page's 30 minutes of idle hold shortened to what this test can wait
        expression = query.replace("$user", ".*").replace("$hostname", ".*").replace("> 1800", "> 0")
        rows = stack.prometheus.wait_for(expression, lambda rows: rows, timeout=30)
        assert all(set(row["metric"]) <= LABELS for row in rows), (query, rows)
    assert any(kernel.id in json.dumps(stack.prometheus.query(query)) for query in queries)


def test_promtool_finds_nothing_to_say(stack: Stack, kernels: tuple[Kernel, Kernel]) -> None:
    kernel, _ = kernels
    stack.prometheus.wait_for(f'gpu_magics_kernel_gpu_memory_bytes{{kernel_id="{kernel.id}"}}', lambda rows: rows)
    text = stack.server.api("GET", "metrics")
    assert "gpu_magics_kernel_gpu_memory_bytes{" in text and "gpu_magics_gpu_power_watts{" in text
    ours = "".join(line + "\n" for line in text.splitlines() if line.split(" ", 2)[-1].startswith("gpu_magics_")
                   or line.startswith("gpu_magics_"))  # fmt: skip
    # promtool 2.42's one remark is about dcgm-exporter's own label spelling, kept for joins (it says the same of
    # dcgm-exporter's series); with that label spelled its way, nothing is left to say
    code, said = promtool(stack, ours)
    camel = "label names should be written in 'snake_case' not 'camelCase'"
    assert code == 3 and said and all(line.endswith(camel) for line in said.splitlines()), said
    assert promtool(stack, ours.replace("modelName=", "model_name=")) == (0, "")
    assert promtool(stack, DCGM_SAMPLE)[1].strip().endswith(camel)
    artifacts = REPO / "test-artifacts" / "metrics"
    artifacts.mkdir(parents=True, exist_ok=True)
    (artifacts / "metrics.txt").write_text(ours)  # the page's example comes from here
    # on the whole page, the rest is about jupyter_server's own gauges named *_total
    _, said = promtool(stack, text)
    assert all(line.endswith(camel) or "_currently_running_total" in line for line in said.splitlines()), said


DCGM_SAMPLE = """# HELP DCGM_FI_DEV_FB_USED Framebuffer memory used (in MiB).
# TYPE DCGM_FI_DEV_FB_USED gauge
DCGM_FI_DEV_FB_USED{gpu="0",UUID="GPU-1",device="nvidia0",modelName="NVIDIA H100 80GB HBM3",Hostname="node"} 1024
"""


def promtool(stack: Stack, text: str) -> tuple[int, str]:
    checked = subprocess.run(
        [stack.promtool, "check", "metrics"], input=text, capture_output=True, text=True, timeout=60
    )
    return checked.returncode, checked.stdout + checked.stderr


def test_a_wrong_token_is_refused(stack: Stack) -> None:
    stack.prometheus.wait_for('up{job="jupyter-wrong-token"}', lambda rows: rows and rows[0]["value"][1] == "0")
    target = stack.prometheus.target("jupyter-wrong-token")
    assert target["health"] == "down" and "403" in target["lastError"]
    assert stack.prometheus.target("jupyter")["health"] == "up"


def test_a_stopped_kernel_s_series_leave_at_the_next_scrape(stack: Stack, kernels: tuple[Kernel, Kernel]) -> None:
    kernel, _ = kernels
    mine = f'{{__name__=~"gpu_magics_kernel_.+|gpu_magics_cluster_.+", kernel_id="{kernel.id}"}}'
    stack.prometheus.wait_for(mine, lambda rows: rows)
    kernel.stop()
    assert f'kernel_id="{kernel.id}"' not in stack.server.api("GET", "metrics")  # the very next scrape
    stack.prometheus.wait_for(mine, lambda rows: rows == [], timeout=30)
    assert stack.prometheus.query("gpu_magics_gpu_memory_total_bytes")  # the GPUs' series stay
