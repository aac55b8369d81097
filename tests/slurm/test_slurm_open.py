"""``%gpucluster --slurm``'s manager on a real SLURM (tests/slurm/setup.sh): making it submits nothing, its
``open`` has SLURM check the job (nothing queued) before a running cluster stops, and in a notebook its start goes
on in the background as a local cluster's does, the jobs in the queue when the magic returns."""

from __future__ import annotations

from pathlib import Path

import pytest
from IPython.core.error import UsageError

from gpu_magics.cluster.control import queries
from gpu_magics.cluster.managers.opening import make_manager
from gpu_magics.cluster.options import parse_cluster_line
from gpu_magics.magics.gpucluster import ClusterMagics
from tests.slurm.conftest import gpucluster, queued
from tests.test_kernel_faults import loaded_kernel
from tests.waiting import wait_for

pytestmark = [pytest.mark.slurm, pytest.mark.slow, pytest.mark.xdist_group("slurm")]


def test_making_and_opening_a_slurm_manager_submits_nothing(queue: None) -> None:
    before = queued()
    manager = make_manager(parse_cluster_line("--slurm --jobs 2 --cpu-workers 1"), {})
    manager.open()  # sbatch --test-only: SLURM checks the job, queues nothing
    assert queued() == before and manager.cluster is None
    assert manager.expected_workers() == 2 and manager.jobs({}) == ()
    assert manager.finish("t") == "%gpucluster: stopped cluster 't'; cancelled its 0 SLURM jobs"
    assert queued() == before


def test_a_job_slurm_refuses_leaves_the_running_cluster_running(magics: ClusterMagics) -> None:
    gpucluster(magics, "--cpu-workers 1 --name t-stays")
    before = queued()
    with pytest.raises(UsageError, match=r"^%gpucluster --slurm: SLURM refused the job: .*nosuch"):
        gpucluster(magics, "--slurm --cpu-workers 1 --partition nosuch --replace")
    current = queries.active()
    assert current is not None and current.name == "t-stays" and current.client.status == "running"
    assert queued() == before
    gpucluster(magics, "stop")


def test_the_start_goes_on_in_the_background_in_a_notebook(queue: None, tmp_path: Path) -> None:
    slow = tmp_path / "slow_preload.py"  # the job's worker takes 5 s more to start: the start is surely under way
    slow.write_text("import time\ntime.sleep(5)\n")
    before = queued()
    with loaded_kernel(tmp_path) as kernel:
        # the job gets the kernel's environment (sbatch's default), and its worker reads dask's config from it
        kernel.ok(f"import os; os.environ['DASK_DISTRIBUTED__WORKER__PRELOAD'] = {str([str(slow)])!r}")
        text = kernel.ok("%gpucluster --slurm --jobs 1 --cpu-workers 1 --name t-bg", timeout=120)
        assert "starting 't-bg'" in text  # its line
        assert len(queued() - before) == 1  # submitted by the start before the magic returned
        assert "starting 't-bg'" in kernel.ok("%gpucluster status")  # the start goes on while cells run
        workers = kernel.ok(
            "import gpu_magics; print(len(gpu_magics.client().scheduler_info()['workers']))", timeout=120
        )
        assert workers.strip().splitlines()[-1] == "1"  # the next cell waited for the workers
        assert "SLURM" in kernel.ok("%gpucluster status")
        assert "cancelled its 1 SLURM job" in kernel.ok("%gpucluster stop", timeout=120)
    wait_for(lambda: not queued() - before, 60, "the job to leave the queue")
