"""``%gpucluster --from`` on real GPUs with dask-jobqueue's job machinery: its ``LocalCluster`` runs each job's
script as a local process, the script starting ``dask cuda worker`` (one worker per GPU), as a ``SLURMCluster``
with ``--gpus-per-job`` does on a compute node. The seed at 80 GB under ``%%gpurun multi-gpu`` gives 11.0, and
``%gpucluster status`` shows the job with its workers' GPUs. Needs dask-jobqueue (gpu-magics[hpc]) and dask-cuda."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from typing import Any

import pytest
from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output

from gpu_magics.cluster.control import queries
from gpu_magics.cluster.control.verbs import stop
from gpu_magics.cluster.records import record as cluster_records
from tests.gpu.conftest import GPU_COUNT

pytest.importorskip("dask_jobqueue", reason="needs dask-jobqueue (gpu-magics[hpc])")
pytest.importorskip("dask_cuda", reason="needs dask-cuda")

SEED = (
    "%%gpurun multi-gpu\n"
    "import dask.array as da\n"
    "t_x = da.random.normal(10, 1, size=(100_000, 100_000), chunks=10_000)\n"
    "(t_x + 1)[::2, ::2].mean().compute()\n"
)


@pytest.fixture
def jobs(ip: InteractiveShell, tmp_path: Any) -> Iterator[Any]:
    from dask_jobqueue.local import LocalCluster

    previous = os.environ.get(cluster_records.RUNTIME_DIR_ENV)
    os.environ[cluster_records.RUNTIME_DIR_ENV] = str(tmp_path)
    made = LocalCluster(
        cores=4 * GPU_COUNT,  # 4 threads per GPU worker, as %gpucluster gives them
        processes=GPU_COUNT,
        memory=f"{16 * GPU_COUNT}GB",
        worker_command="dask cuda worker",
        scheduler_options={"dashboard_address": ":0", "host": "127.0.0.1"},
    )
    ip.user_ns["t_jobs"] = made
    try:
        yield made
    finally:
        stop.stop()
        made.close()
        if previous is None:
            del os.environ[cluster_records.RUNTIME_DIR_ENV]
        else:
            os.environ[cluster_records.RUNTIME_DIR_ENV] = previous


def test_a_jobqueue_job_running_dask_cuda_workers_computes_the_seed(ip: InteractiveShell, jobs: Any) -> None:
    began = time.perf_counter()
    jobs.scale(jobs=1)
    with capture_output() as captured:
        ip.run_line_magic("gpucluster", "--from t_jobs --wait 300")
    started = time.perf_counter() - began
    text = captured.stdout + "\n".join(o.data.get("text/plain", "") for o in captured.outputs)
    assert queries.has_gpu_workers(), text
    client = queries.require_client()
    assert len(client.scheduler_info(n_workers=-1)["workers"]) == GPU_COUNT

    with capture_output() as captured:
        result = ip.run_cell(SEED)
    assert result.success, captured.stdout
    assert float(result.result) == pytest.approx(11.0, abs=1e-3)
    began = time.perf_counter()
    with capture_output():
        again = ip.run_cell(SEED)
    warm = time.perf_counter() - began
    assert again.success and float(again.result) == pytest.approx(11.0, abs=1e-3)

    with capture_output() as captured:
        ip.run_line_magic("gpucluster", "status")
    status = captured.stdout + "\n".join(o.data.get("text/plain", "") for o in captured.outputs)
    (job_id,) = {str(job.job_id) for job in jobs.workers.values()}
    job_line = next(line for line in status.splitlines() if line.startswith(f"job {job_id} running"))
    assert job_line.count("GPU ") >= GPU_COUNT and "· GPUs " in job_line, status
    print(f"\njobqueue LocalCluster, 1 job x {GPU_COUNT} dask-cuda workers: up and warm in {started:.1f} s; "
          f"seed 80 GB warm cell {warm:.2f} s\n{job_line}")  # fmt: skip
    with capture_output() as captured:
        ip.run_line_magic("gpucluster", "stop --close")
    assert "closed" in captured.stdout
