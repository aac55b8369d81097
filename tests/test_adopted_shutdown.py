"""A kernel holding an adopted ``LocalCluster`` (``%gpucluster --from c``), driven as JupyterLab drives it
(jupyter_client): an interrupt (SIGINT to the kernel's whole process group) leaves its workers alone, and the
kernel's shutdown prints no worker's or nanny's traceback in the server's terminal (the kernel's stderr), also
where every worker's heartbeat is still in flight as it closes."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from jupyter_client.manager import KernelManager

from tests.test_kernel_faults import REPO, Kernel

pytestmark = pytest.mark.slow

ADOPT = (
    "from distributed import LocalCluster\n"
    "c = LocalCluster(n_workers=2, threads_per_worker=1, dashboard_address=None)\n"
    "%gpucluster --from c"
)
# The scheduler answers heartbeats only after a minute; the cell ends once both workers' heartbeats wait for it.
HEARTBEATS_IN_FLIGHT = """
import asyncio, time

answer, waiting = c.scheduler.handlers["heartbeat_worker"], set()


async def answer_late(*args, **kwargs):
    waiting.add(kwargs["address"])
    await asyncio.sleep(60)
    return answer(*args, **kwargs)


c.scheduler.handlers["heartbeat_worker"] = answer_late
while len(waiting) < 2:
    time.sleep(0.05)
"""


class QuietKernel(Kernel):
    """``Kernel``, its stdout and stderr kept in a file (what the server's terminal would show)."""

    def __init__(self, runtime_dir: Path, log: Path) -> None:
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
            "GPU_MAGICS_RUNTIME_DIR": str(runtime_dir),
            "GPU_MAGICS_SOURCE": "fake:0",
        }
        self._log = log.open("w")
        self.manager = KernelManager(kernel_name="python3")
        self.manager.start_kernel(env=env, cwd=str(runtime_dir), stdout=self._log, stderr=self._log)
        self.client = self.manager.client()
        self.client.start_channels()
        self.client.wait_for_ready(timeout=120)


def test_an_adopted_local_cluster_ends_quietly_with_its_kernel(tmp_path: Path) -> None:
    log = tmp_path / "kernel.log"
    kernel = QuietKernel(tmp_path, log)
    try:
        kernel.ok("%load_ext gpu_magics")
        kernel.ok(ADOPT, timeout=120)
        pids = kernel.worker_pids()
        kernel.manager.interrupt_kernel()  # SIGINT to the kernel's process group, its workers' too
        assert "2" in kernel.ok("import time; time.sleep(0.5); print(len(c.scheduler_info['workers']))")
        assert kernel.worker_pids() == pids  # the interrupt did not end them
        shut_down(kernel)
    finally:
        kernel.close()
        kernel._log.close()
    said = log.read_text()
    assert "Traceback" not in said and "CancelledError" not in said and "KeyboardInterrupt" not in said, said


def test_workers_closing_mid_heartbeat_end_quietly_with_their_kernel(tmp_path: Path) -> None:
    """A worker that closes while its heartbeat is in flight cuts the heartbeat off itself, which distributed logs
    as an error with a traceback: the shutdown quiets the workers first."""
    log = tmp_path / "kernel.log"
    kernel = QuietKernel(tmp_path, log)
    try:
        kernel.ok("%load_ext gpu_magics")
        kernel.ok(ADOPT, timeout=120)
        kernel.ok(HEARTBEATS_IN_FLIGHT)
        shut_down(kernel)
    finally:
        kernel.close()
        kernel._log.close()
    said = log.read_text()
    assert "Traceback" not in said and "ERROR" not in said, said


def shut_down(kernel: QuietKernel) -> None:
    """Shut the kernel down as JupyterLab does (an interrupt, then a shutdown request), and wait until it ended."""
    process = kernel.manager.provisioner.process  # type: ignore[union-attr]
    kernel.client.stop_channels()
    kernel.manager.shutdown_wait_time = 30.0
    kernel.manager.shutdown_kernel(now=False)
    process.wait(timeout=30)
