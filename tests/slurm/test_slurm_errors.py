"""``%gpucluster --slurm`` where it cannot work: each a one-line ``UsageError`` with nothing left in the queue; and
a kernel that restarts cancels its jobs."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import dask
import pytest
from IPython.core.error import UsageError

import gpu_magics
from gpu_magics.cluster.control import queries
from gpu_magics.magics.gpucluster import ClusterMagics
from tests.slurm.conftest import gpucluster, queued
from tests.waiting import wait_for

pytestmark = [pytest.mark.slurm, pytest.mark.slow, pytest.mark.xdist_group("slurm")]
REPO = Path(gpu_magics.__file__).resolve().parent.parent


def one_line_error(magics: ClusterMagics, line: str) -> str:
    with pytest.raises(UsageError) as caught:
        gpucluster(magics, line)
    message = str(caught.value)
    assert "\n" not in message and "Traceback" not in message
    assert queries.active() is None
    return message


def test_a_partition_slurm_refuses_is_its_own_message_and_queues_nothing(magics: ClusterMagics) -> None:
    before = queued()
    message = one_line_error(magics, "--slurm --jobs 2 --cpu-workers 1 --partition nosuch")
    assert message.startswith("%gpucluster --slurm: SLURM refused the job: ")
    assert "invalid partition specified: nosuch" in message
    assert queued() == before


def test_a_job_asking_more_than_any_node_has_is_refused_before_queueing(magics: ClusterMagics) -> None:
    cpus = os.cpu_count() or 1
    message = one_line_error(magics, f"--slurm --cpu-workers {cpus + 1}")
    assert "SLURM refused the job: " in message and "node configuration is not available" in message


def test_a_job_that_dies_at_start_names_its_log(magics: ClusterMagics, tmp_path: Path) -> None:
    with dask.config.set(
        {"jobqueue.slurm.python": "/nonexistent/python", "jobqueue.slurm.log-directory": str(tmp_path)}
    ):
        message = one_line_error(magics, "--slurm --jobs 1 --cpu-workers 1 --wait 120")
    assert "before its workers started" in message and "/nonexistent/python" in message
    log = message.rpartition("its log: ")[2]
    assert Path(log).parent == tmp_path and Path(log).is_file()
    assert not queued()


def test_no_sbatch_on_path(magics: ClusterMagics, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    message = one_line_error(magics, "--slurm --jobs 1 --cpu-workers 1")
    assert message.startswith("%gpucluster --slurm: no sbatch on PATH")


def test_without_dask_jobqueue_the_extra_is_named(magics: ClusterMagics, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "dask_jobqueue", None)
    message = one_line_error(magics, "--slurm --jobs 1 --cpu-workers 1")
    assert "dask-jobqueue is not installed" in message and "gpu-magics[hpc]" in message


KERNEL_CELLS = ("%load_ext gpu_magics", "%gpucluster --slurm --jobs 1 --cpu-workers 1 --name t-restart")


def test_a_kernel_restart_or_shutdown_cancels_its_jobs(slurm: None, queue: None, tmp_path: Path) -> None:
    from jupyter_client.manager import KernelManager

    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
        "GPU_MAGICS_RUNTIME_DIR": str(tmp_path),
    }
    manager = KernelManager(kernel_name="python3")
    manager.start_kernel(env=env, cwd=str(tmp_path))
    try:
        for round_ in ("restart", "shutdown"):
            before = queued()
            client = manager.client()
            client.start_channels()
            try:
                client.wait_for_ready(timeout=60)
                for cell in KERNEL_CELLS:
                    reply = client.execute_interactive(cell, timeout=120)
                    assert reply["content"]["status"] == "ok", reply["content"]
            finally:
                client.stop_channels()
            started = queued() - before
            assert len(started) == 1
            began = time.monotonic()
            if round_ == "restart":
                manager.restart_kernel(now=False)
            else:
                manager.shutdown_kernel(now=False)
            wait_for(lambda: not started & queued(), 60, f"the kernel's job to leave the queue on {round_}")  # noqa: B023
            print(f"kernel {round_}: its job left the queue {time.monotonic() - began:.1f} s after the request")
    finally:
        if manager.is_alive():
            manager.shutdown_kernel(now=True)
