"""``/metrics`` and the leftovers on a real GPU: a jupyter-server on NVML and a kernel it started that holds CuPy
memory; the kernel's ``gpu_magics_kernel_gpu_memory_bytes`` against NVML's figure for the kernel's process; then a
child of the kernel holding CuPy memory, the kernel's while it lives (``part="children"``), outlives the SIGKILLed
kernel: listed with NVML's bytes, counted on ``/metrics``, ended on request, gone from NVML's list. Where NVML's pids
are not this machine's (a container without the host's pid namespace), the comparison cannot be made and the test
says so."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from jupyter_client.blocking.client import BlockingKernelClient
from prometheus_client.parser import text_string_to_metric_families

from tests.prometheus.harness import JupyterServer

GIB = 2**30
CHILD = (
    "import cupy, time\n"
    "x = cupy.ones(2**29, dtype='float32')\n"  # 2 GiB
    "cupy.cuda.Device().synchronize()\n"
    "print('ready', flush=True)\n"
    "time.sleep(600)\n"
)

CHILD_CELL = f"""
import subprocess, sys
child = subprocess.Popen([sys.executable, "-c", {CHILD!r}], stdout=subprocess.PIPE, text=True)
child.stdout.readline()
print(child.pid)
"""


def nvml_processes(index: int = 0) -> dict[int, int]:
    """pid -> bytes on GPU ``index``, as NVML lists its compute processes."""
    import pynvml

    pynvml.nvmlInit()
    try:
        handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        return {p.pid: int(p.usedGpuMemory or 0) for p in pynvml.nvmlDeviceGetComputeRunningProcesses(handle)}
    finally:
        pynvml.nvmlShutdown()


def wait(probe: Any, timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = probe()
        if found:
            return found
        time.sleep(0.5)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def _at_least(value: float | None, least: float) -> float | None:
    """``value`` where it is ``least`` or more (a figure read before the memory was taken is not yet it)."""
    return value if value is not None and value >= least else None


def recorded(server: JupyterServer, pid: int) -> str | None:
    """The kernel id the server's record of its kernels' processes gives ``pid`` (None: not recorded yet)."""
    for path in Path(server.env["GPU_MAGICS_RUNTIME_DIR"]).glob("gpu-magics-server-*-processes.json"):
        with contextlib.suppress(OSError, ValueError):  # written atomically; a file of an ended server may go
            for entry in json.loads(path.read_text())["processes"]:
                if entry["pid"] == pid:
                    return str(entry["kernel_id"])
    return None


@pytest.fixture
def server(tmp_path: Path) -> Iterator[JupyterServer]:
    env = {"GPU_MAGICS_SOURCE": "nvml", "GPU_MAGICS_RUNTIME_DIR": str(tmp_path / "gpu-magics-runtime"),
           "CUDA_VISIBLE_DEVICES": os.environ.get("CUDA_VISIBLE_DEVICES", "0")}  # fmt: skip
    # a killed kernel stays dead: jupyter's automatic restart would end its process group, the child included,
    # while the test lists and counts it (seen: the end request found it gone)
    started = JupyterServer(tmp_path, env, "--GpuMagicsServer.metrics_interval=0.5",
                            "--GpuMagicsServer.slow_interval=0.5", "--KernelRestarter.restart_limit=0")  # fmt: skip
    try:
        started.start()
        yield started
    finally:
        started.stop()


def run(client: BlockingKernelClient, code: str, timeout: float = 300) -> str:
    msg_id = client.execute(code)
    text = []
    deadline = time.monotonic() + timeout
    while True:
        message = client.get_iopub_msg(timeout=max(0.1, deadline - time.monotonic()))
        if message["parent_header"].get("msg_id") != msg_id:
            continue
        if message["msg_type"] == "stream":
            text.append(message["content"]["text"])
        elif message["msg_type"] == "error":
            raise AssertionError("\n".join(message["content"]["traceback"]))
        elif message["msg_type"] == "status" and message["content"]["execution_state"] == "idle":
            return "".join(text)


def kernel_bytes(server: JupyterServer, kernel_id: str) -> dict[str, float]:
    found = {}
    for family in text_string_to_metric_families(server.api("GET", "metrics")):
        for sample in family.samples:
            if sample.name == "gpu_magics_kernel_gpu_memory_bytes" and sample.labels["kernel_id"] == kernel_id:
                found[sample.labels["part"]] = sample.value
    return found


def test_kernel_bytes_match_nvml_and_a_real_leftover_is_ended(server: JupyterServer) -> None:
    kernel_id = str(server.api("POST", "api/kernels", {"name": "python3"})["id"])
    client = BlockingKernelClient(connection_file=str(server.runtime / f"kernel-{kernel_id}.json"))
    client.load_connection_file()
    client.start_channels(hb=False)
    child_pid = None
    try:
        client.wait_for_ready(timeout=120)
        kernel_pid = int(run(client, "import os; print(os.getpid())").strip())
        run(client, "%load_ext gpu_magics")
        run(client, "import cupy\nx = cupy.ones((256, 1024, 1024), dtype='float32')\ncupy.cuda.Device().synchronize()")
        listed = wait(lambda: nvml_processes(), 30, "NVML's process list")
        if kernel_pid not in listed:
            pytest.skip(f"NVML's pids are not this machine's (it lists {sorted(listed)}, the kernel is {kernel_pid})")
        # the kernel's own bytes: NVML's figure for its process (the kernel reads it after each cell)
        deadline = time.monotonic() + 60
        while True:
            nvml = nvml_processes()[kernel_pid]
            shown = kernel_bytes(server, kernel_id).get("kernel")
            if shown == nvml or time.monotonic() > deadline:
                break
            run(client, "pass")  # a cell end: the kernel's record follows NVML again
            time.sleep(1)
        print(f"\nkernel: /metrics {shown} bytes, NVML {nvml} bytes")
        assert shown is not None and abs(shown - nvml) <= 0.02 * nvml
        # a child holding CuPy memory outlives the kernel
        child_pid = int(run(client, CHILD_CELL).strip())
        wait(lambda: child_pid in nvml_processes(), 60, "the child on NVML's list")
        # the child said "ready" after its 2 GiB were allocated and synchronized; NVML shows them, then /metrics
        # (the server samples NVML every 0.5 s: its first figure for the child may be of the CUDA context alone)
        wait(lambda: nvml_processes().get(child_pid, 0) >= 2 * GIB, 60, "the child's 2 GiB on NVML's list")
        # while the kernel lives, its child's memory is the kernel's: part="children"
        children = wait(lambda: _at_least(kernel_bytes(server, kernel_id).get("children"), 2 * GIB), 60,
                        "the child's 2 GiB on /metrics")  # fmt: skip
        assert children >= 2 * GIB
        # the server records the kernels' processes (every 2 s, in its runtime dir): the child is the kernel's there
        wait(lambda: recorded(server, child_pid) == kernel_id, 60, "the child recorded as the kernel's")
        os.kill(kernel_pid, signal.SIGKILL)
        found = wait(lambda: [r for r in server.api("GET", "gpu-magics/api/leftovers")["leftovers"]
                              if r["pid"] == child_pid and r["used_memory"] >= 2 * GIB], 60,
                     "the leftover listed with its 2 GiB")  # fmt: skip
        print(f"leftover: {found[0]}, NVML {nvml_processes().get(child_pid)}")
        assert found[0]["kernel_id"] == kernel_id and found[0]["used_memory"] >= 2 * GIB
        assert wait(lambda: "gpu_magics_leftover_processes{" in server.api("GET", "metrics"), 30, "/metrics")
        reply = server.api("POST", "gpu-magics/api/leftovers/end",
                           {"processes": [{"pid": child_pid, "started": found[0]["started"]}]})  # fmt: skip
        assert reply["results"] == [{"pid": child_pid, "ended": True, "reason": None}]
        wait(lambda: child_pid not in nvml_processes(), 30, "the child gone from NVML's list")
    finally:
        client.stop_channels()
        if child_pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(child_pid, signal.SIGKILL)
        server.delete_kernel(kernel_id)  # SIGKILLed above: the server may have let it go already (404)
