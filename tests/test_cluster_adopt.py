"""``%gpucluster --from NAME`` with cluster manager objects made in the notebook: distributed's ``LocalCluster``
and ``SpecCluster``, dask-jobqueue's ``LocalCluster`` (its job machinery, as local processes). The magic
connects, warms and writes its record; scale and adapt go through the object; stop detaches, stop --close closes."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from distributed import LocalCluster, Nanny, Scheduler, SpecCluster
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output

from gpu_magics.cluster.control import queries
from gpu_magics.cluster.control.verbs import stop
from gpu_magics.cluster.records import record as cluster_records
from gpu_magics.magics.gpucluster import ClusterMagics
from tests.waiting import wait_for

pytestmark = pytest.mark.slow

SEED = (
    "%%gpurun multi-gpu\n"
    "import dask.array as da\n"
    "t_x = da.random.normal(10, 1, size=(2_000, 2_000), chunks=500)\n"
    "(t_x + 1)[::2, ::2].mean().compute()\n"
)


@pytest.fixture
def runtime_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv(cluster_records.RUNTIME_DIR_ENV, str(tmp_path))
    return tmp_path


@pytest.fixture
def magics(ip: InteractiveShell, runtime_dir: Path) -> Iterator[ClusterMagics]:
    instance = ip.magics_manager.registry["ClusterMagics"]
    yield instance
    stop.stop()


def gpucluster(magics: ClusterMagics, line: str) -> str:
    with capture_output() as captured:
        magics.gpucluster(line)
    return captured.stdout + "\n".join(output.data.get("text/plain", "") for output in captured.outputs)


def workers(manager: object) -> int:
    return len(manager.scheduler_info["workers"])  # type: ignore[attr-defined]


def test_a_local_cluster_is_adopted_scaled_through_itself_and_only_detached(
    ip: InteractiveShell, magics: ClusterMagics, runtime_dir: Path
) -> None:
    made = LocalCluster(
        n_workers=1, threads_per_worker=1, processes=True, dashboard_address=":0", silence_logs=logging.ERROR
    )
    ip.user_ns["t_lc"] = made
    try:
        text = gpucluster(magics, "--from t_lc")
        assert "Cluster 't_lc': 1 CPU worker x 1 thread, adopted LocalCluster, not started here" in text
        record = json.loads(next(runtime_dir.glob("gpu-magics-cluster-*-t_lc.json")).read_text())
        assert record["kind"] == "adopted" and record["manager"] == "LocalCluster" and record["workers"] == 1

        assert "scaled 't_lc' to 2 worker(s)" in gpucluster(magics, "scale 2")
        assert workers(made) == 2  # through the object's own scale()
        with capture_output():
            result = ip.run_cell(SEED)
        assert result.success and abs(float(result.result) - 11.0) < 5e-2

        current = queries.active()
        assert current is not None and current.manager is not None
        said = current.manager._wait_for_retired(current.client, 0.0, 1)  # nobody asked the second one to leave
        assert said is not None and "1 of 2 workers still retiring after" in said
        assert "scaled 't_lc' to 1 worker" in gpucluster(magics, "scale 1")
        assert workers(made) == 1  # the magic waited for the retired worker to leave
        gpucluster(magics, "scale 2")

        text = gpucluster(magics, "adapt 1 3")
        assert "adapts between 1 and 3 workers" in text
        assert made._adaptive is not None and made._adaptive.maximum == 3

        said = gpucluster(magics, "stop")
        assert "detached from 't_lc' (LocalCluster)" in said and "stop --close closes it" in said
        assert made.status.name == "running" and queries.active() is None
        assert list(runtime_dir.glob("gpu-magics-cluster-*.json")) == []

        gpucluster(magics, "--from t_lc --name again")
        said = gpucluster(magics, "stop --close")
        assert "stopped cluster 'again' (LocalCluster: closed)" in said
        assert made.status.name == "closed"
    finally:
        made.close()


def test_an_adopted_local_cluster_without_a_dashboard_shows_no_link_and_no_start_up(
    ip: InteractiveShell, magics: ClusterMagics, runtime_dir: Path
) -> None:
    """``LocalCluster(dashboard_address=None)`` still serves HTTP on a dashboard port (health, metrics) and lists
    it, but answers 404 where the dashboard would be: the card shows no link; it says when it was adopted only."""
    made = LocalCluster(
        n_workers=1, threads_per_worker=1, processes=False, dashboard_address=None, silence_logs=logging.ERROR
    )
    ip.user_ns["t_nodash"] = made
    try:
        text = gpucluster(magics, "--from t_nodash")
        assert "dashboard: off" in text and "/status" not in text, text
        assert "adopted at" in text and "started in" not in text and "workers ready" not in text, text
        record = json.loads(next(runtime_dir.glob("gpu-magics-cluster-*-t_nodash.json")).read_text())
        assert record["dashboard_url"] is None
        gpucluster(magics, "stop")
    finally:
        made.close()


def test_a_spec_cluster_and_a_closed_one(ip: InteractiveShell, magics: ClusterMagics) -> None:
    spec = SpecCluster(
        scheduler={"cls": Scheduler, "options": {"dashboard_address": ":0"}},
        workers={"w-0": {"cls": Nanny, "options": {"nthreads": 1}}},
        worker={"cls": Nanny, "options": {"nthreads": 1}},
        silence_logs=logging.ERROR,
    )
    ip.user_ns["t_spec"] = spec
    try:
        text = gpucluster(magics, "--from t_spec")
        assert "1 CPU worker" in text and "adopted SpecCluster" in text
        gpucluster(magics, "scale 2")
        assert set(spec.workers) != {"w-0"} and workers(spec) == 2
        gpucluster(magics, "stop --close")
        assert spec.status.name == "closed"
        with pytest.raises(UsageError, match="t_spec is closed; make a new one"):
            gpucluster(magics, "--from t_spec")
    finally:
        spec.close()


def test_a_dask_jobqueue_cluster_shows_its_jobs(ip: InteractiveShell, magics: ClusterMagics) -> None:
    from dask_jobqueue.local import LocalCluster as JobQueueLocalCluster

    jobs = JobQueueLocalCluster(cores=1, processes=1, memory="1GB", scheduler_options={"dashboard_address": ":0"})
    ip.user_ns["t_jq"] = jobs
    try:
        jobs.scale(jobs=2)
        text = gpucluster(magics, "--from t_jq --wait 120")
        assert "2 CPU workers" in text and "adopted LocalCluster" in text
        pids = {str(job.job_id) for job in jobs.workers.values()}
        assert len(pids) == 2
        for pid in pids:
            assert f"job {pid} running" in text
        gpucluster(magics, "stop --close")
        wait_for(lambda: not any(_alive(int(pid)) for pid in pids), 30, "the jobs' processes to end")
    finally:
        jobs.close()


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_workers_that_see_gpus_without_cupy_stay_cpu_workers(
    ip: InteractiveShell, magics: ClusterMagics, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Workers on a host with (simulated) GPUs but no CuPy: the warm-up runs on their CPUs instead of failing
    with "Please install cupy", and their chunks stay NumPy."""
    monkeypatch.setenv("GPU_MAGICS_SOURCE", "fake:2")  # the worker processes inherit it: they see 2 GPUs
    made = LocalCluster(
        n_workers=1, threads_per_worker=1, processes=True, dashboard_address=":0", silence_logs=logging.ERROR
    )
    ip.user_ns["t_gpus"] = made
    try:
        text = gpucluster(magics, "--from t_gpus")
        assert "Cluster 't_gpus'" in text and "could not use" not in text and "did not start" not in text
        current = queries.active()
        assert current is not None
        assert [seen.get("cupy") for seen in current.devices.values()] == [False]
        assert queries.split_workers_by_gpu()[0] == set()  # not a GPU worker for arrays
        with capture_output():
            result = ip.run_cell(SEED)
        assert result.success and abs(float(result.result) - 11.0) < 5e-2
    finally:
        stop.stop()
        made.close()
