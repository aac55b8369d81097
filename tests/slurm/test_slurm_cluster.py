"""``%gpucluster --slurm`` on a real SLURM (tests/slurm/setup.sh): CPU workers from jobs on this host; start,
status with the jobs, a ``%%gpurun multi-gpu`` cell, jobs that wait, adapt, stop, and nothing left queued."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest
from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output

from gpu_magics.cluster.control import queries
from gpu_magics.cluster.control.verbs import start
from gpu_magics.magics.gpucluster import ClusterMagics
from tests.slurm.conftest import gpucluster, queued
from tests.waiting import wait_for

pytestmark = [pytest.mark.slurm, pytest.mark.slow, pytest.mark.xdist_group("slurm")]

SEED = (
    "%%gpurun multi-gpu\n"
    "import dask.array as da\n"
    "t_x = da.random.normal(10, 1, size=(4_000, 4_000), chunks=1_000)\n"
    "(t_x + 1)[::2, ::2].mean().compute()\n"
)


def job_ids() -> set[str]:
    current = queries.active()
    assert current is not None and current.manager is not None
    return set(current.manager.submitted)  # type: ignore[attr-defined]


def test_two_jobs_give_two_workers_a_cell_runs_and_stop_leaves_nothing_queued(
    magics: ClusterMagics, ip: InteractiveShell, runtime_dir: Path
) -> None:
    began = time.perf_counter()
    text = gpucluster(magics, "--slurm --jobs 2 --cpu-workers 1 --name t-slurm")
    took = time.perf_counter() - began
    print(f"--slurm --jobs 2 --cpu-workers 1: workers up and warm in {took:.1f} s")
    ids = job_ids()
    assert len(ids) == 2 and ids <= queued()
    assert "2 CPU workers" in text and "from SLURM jobs" in text
    status = gpucluster(magics, "status")
    for job_id in ids:
        assert f"job {job_id} running on " in status
    record = json.loads(next(runtime_dir.glob("gpu-magics-cluster-*-t-slurm.json")).read_text())
    assert record["kind"] == "slurm" and {job["job_id"] for job in record["jobs"]} == ids
    assert all(job["state"] == "running" and len(job["workers"]) == 1 for job in record["jobs"])

    with capture_output() as captured:
        result = ip.run_cell(SEED)
    assert result.success, captured.stdout
    assert abs(float(result.result) - 11.0) < 1e-2
    shown = "\n".join(output.data.get("text/plain", "") for output in captured.outputs)
    assert "multi-gpu · 2 CPU workers" in shown

    said = gpucluster(magics, "stop")
    assert "cancelled its 2 SLURM jobs" in said
    assert not ids & queued()
    assert list(runtime_dir.glob("gpu-magics-cluster-*-t-slurm.json")) == []


def test_a_job_that_waits_is_named_with_its_reason_and_cells_run_on_the_workers_up(
    magics: ClusterMagics, ip: InteractiveShell
) -> None:
    # the node has 2 CPUs and each job asks for 1: the third waits for resources
    began = time.perf_counter()
    text = gpucluster(magics, "--slurm --jobs 3 --cpu-workers 1 --wait 20")
    assert time.perf_counter() - began < 120
    ids = job_ids()
    assert len(ids) == 3 and ids <= queued()
    assert re.search(r"\b[012] of 3 workers up after 20 s; job \d+ pending \(", text), text
    waiting = max(ids, key=int)

    def pending_for_resources() -> str | None:
        status = gpucluster(magics, "status")
        return status if f"job {waiting} pending (Resources)" in status else None

    wait_for(pending_for_resources, 60, "the third job to wait for resources")
    wait_for(lambda: gpucluster(magics, "status").count(" running on ") == 2, 60, "two jobs running")
    queries.require_client().wait_for_workers(2, timeout=60)
    with capture_output():
        result = ip.run_cell(SEED)
    assert result.success and abs(float(result.result) - 11.0) < 1e-2
    gpucluster(magics, "stop")
    assert not ids & queued()


def test_adapt_gives_jobs_back_when_idle_and_asks_again_for_work(magics: ClusterMagics) -> None:
    gpucluster(magics, "--slurm --jobs 1 --cpu-workers 1")
    first = job_ids()
    text = gpucluster(magics, "adapt 0 2")
    assert "adapts between 0 and 2 workers" in text
    client = queries.require_client()
    wait_for(lambda: not first & queued(), 90, "the idle job to leave the queue")
    assert client.scheduler_info(n_workers=-1)["workers"] == {}

    future = client.submit(sum, [1, 2, 3], pure=False)
    assert future.result(timeout=120) == 6  # adapting asked SLURM for a job again
    every = job_ids()
    assert every - first
    gpucluster(magics, "stop")
    assert not every & queued()


def test_scale_asks_the_manager_for_more_jobs(magics: ClusterMagics) -> None:
    gpucluster(magics, "--slurm --jobs 1 --cpu-workers 1")
    text = gpucluster(magics, "scale 2")
    assert "scaled 'slurm' to 2 worker(s)" in text
    ids = job_ids()
    assert len(ids) == 2 and ids <= queued()
    gpucluster(magics, "stop")
    assert not ids & queued()


def test_the_idle_timeout_cancels_the_jobs(magics: ClusterMagics) -> None:
    # long enough that the cluster is still up when the start returns on a loaded machine (2 s was not)
    gpucluster(magics, "--slurm --jobs 1 --cpu-workers 1 --idle-timeout 8s")
    ids = job_ids()
    assert ids <= queued()
    wait_for(lambda: queries.active() is None, 60, "the idle cluster to close")
    wait_for(lambda: not ids & queued(), 60, "its job to leave the queue")


def test_cpu_workers_stay_cpu_workers_on_a_host_with_gpus(
    magics: ClusterMagics, ip: InteractiveShell, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--cpu-workers`` on a node whose GPUs the workers see (simulated here; a real GPU node without CuPy too):
    they warm on their CPUs and stay CPU workers, where the warm-up used to switch to CuPy and fail."""
    monkeypatch.setenv("GPU_MAGICS_SOURCE", "fake:2")  # the jobs' workers inherit it: they see 2 GPUs
    text = gpucluster(magics, "--slurm --jobs 1 --cpu-workers 1 --name t-cpu-stays")
    try:
        assert "did not start" not in text and "1 CPU worker" in text
        assert queries.split_workers_by_gpu()[0] == set()
        with capture_output() as captured:
            result = ip.run_cell(SEED)
        assert result.success, captured.stdout
        assert abs(float(result.result) - 11.0) < 1e-2
    finally:
        gpucluster(magics, "stop")


def test_an_spmd_cell_runs_one_rank_per_job_worker(magics: ClusterMagics, ip: InteractiveShell) -> None:
    """The same SPMD cell on workers from SLURM jobs: one rank each, torchrun's environment, rank 0's host."""
    gpucluster(magics, "--slurm --jobs 2 --cpu-workers 1 --name t-spmd")
    try:
        with capture_output() as captured:
            result = ip.run_cell(
                "%%gpurun spmd -q -o t_ranks\nimport os\n(os.environ['RANK'], os.environ['WORLD_SIZE'], os.getpid())"
            )
        assert result.success, captured.stdout + captured.stderr
        values = ip.user_ns.pop("t_ranks").values
        assert [value[:2] for value in values] == [("0", "2"), ("1", "2")]
        assert values[0][2] != values[1][2]
    finally:
        gpucluster(magics, "stop")


def test_the_start_line_says_how_many_workers_are_up_and_which_jobs_wait(magics: ClusterMagics) -> None:
    """In a notebook ``--slurm`` does not wait without a word: its line (heard here as the magic's line hears it)
    counts the workers up and names the jobs pending, and why."""
    from gpu_magics.cluster.options import parse_cluster_line

    lines: list[str] = []
    starting = start.begin(
        parse_cluster_line("--slurm --jobs 3 --cpu-workers 1 --wait 8 --name t-line"),
        listen=lambda start: start.listen(lambda progress: lines.append(progress.line())),
    )
    assert starting.wait() is not None  # it ran here: returned after --wait, with a job still pending
    assert any(re.search(r"\b0 of 3 workers up", line) for line in lines), lines
    assert any(re.search(r"\bof 3 workers up, 0 warm; job \d+ pending \(\w+", line) for line in lines), lines
    gpucluster(magics, "stop")
