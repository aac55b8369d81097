"""``--slurm``'s arguments for dask-jobqueue (the line over the site's config) and ``--from`` with something that is
not a cluster manager: pure parts, no processes."""

from __future__ import annotations

from typing import Any

import pytest
from IPython.core.error import UsageError

from gpu_magics.cluster.managers.adopted import adopt
from gpu_magics.cluster.managers.slurm.manager import job_arguments
from gpu_magics.cluster.options import parse_cluster_line


def arguments(line: str, config: dict[str, Any] | None = None) -> dict[str, Any]:
    return job_arguments(parse_cluster_line(line), config or {})


def test_cpu_workers_per_job() -> None:
    got = arguments("--slurm --jobs 2 --cpu-workers 3 --partition short --account proj --walltime 01:00:00")
    assert got["processes"] == 3 and got["cores"] == 3 and got["memory"] == "6GB"
    assert got["queue"] == "short" and got["account"] == "proj" and got["walltime"] == "01:00:00"
    assert "worker_command" not in got  # distributed's worker
    assert got["job_extra_directives"] == []


def test_gpus_per_job_run_dask_cuda_workers_and_ask_for_gres_or_gpus() -> None:
    got = arguments("--slurm --gpus-per-job 4 --job-option=--constraint=a100 --job-option '-C x'")
    assert got["worker_command"] == "dask cuda worker" and got["processes"] == 4
    assert got["cores"] == 16  # 4 threads per GPU worker
    assert got["job_extra_directives"] == ["--gres=gpu:4", "--constraint=a100", "-C x"]
    assert arguments("--slurm --gpus-per-job 2 --gpu-directive gpus")["job_extra_directives"] == ["--gpus=2"]


def test_the_site_config_gives_what_the_line_leaves_out() -> None:
    config = {
        "cores": 32,
        "memory": "200GB",
        "job-extra-directives": ["--qos=high"],
        "scheduler-options": {"interface": "ib0"},
        "log-directory": "/shared/logs",
    }
    got = arguments("--slurm --gpus-per-job 4", config)
    assert got["cores"] == 32 and got["memory"] == "200GB" and got["log_directory"] == "/shared/logs"
    assert got["job_extra_directives"] == ["--qos=high", "--gres=gpu:4"]
    assert got["scheduler_options"]["interface"] == "ib0" and "host" not in got["scheduler_options"]
    line = arguments("--slurm --gpus-per-job 4 --threads-per-worker 2 --memory 64GB --host 10.0.0.1", config)
    assert line["cores"] == 8 and line["memory"] == "64GB" and line["scheduler_options"]["host"] == "10.0.0.1"
    assert arguments("--slurm --interface ib1")["interface"] == "ib1"
    assert arguments("--slurm --no-dashboard")["scheduler_options"]["dashboard"] is False


@pytest.mark.parametrize(
    ("line", "said"),
    [
        ("--jobs 2", "--jobs belongs to --slurm"),
        ("--partition gpu", "--partition belongs to --slurm"),
        ("--slurm --gpus-per-job 2 --cpu-workers 2", "choose one of --gpus-per-job G"),
        ("--slurm --gpus 0,1", "--gpus belongs to GPU clusters, not to --slurm (a job's GPUs: --gpus-per-job G)"),
        ("--slurm --address tcp://h:1", "choose one of --slurm"),
        ("--slurm --from t_c", "choose one of --slurm"),
        ("--from t_c --cpu-workers 2", "--cpu-workers belongs to clusters started here"),
        ("--slurm --walltime soon", "invalid walltime 'soon'"),
        ("--slurm --partition 'a b'", "invalid partition 'a b'"),
        ("--slurm --job-option constraint", "invalid job option 'constraint'"),
        ("--wait 10", "--wait belongs to --slurm, --from and --gateway"),
        ("start --close", "--close belongs to stop"),
        ("adapt 2", "give the least and most workers"),
        ("adapt 3 1", "expected MIN <= MAX"),
        ("adapt 0 0", "MAX at least 1"),
    ],
)
def test_bad_lines_are_one_line(line: str, said: str) -> None:
    with pytest.raises(UsageError) as caught:
        parse_cluster_line(line)
    assert said in str(caught.value) and "\n" not in str(caught.value)


def test_adapt_and_stop_close_parse() -> None:
    assert parse_cluster_line("adapt 0 8").adapt_range == (0, 8)
    assert parse_cluster_line("stop --close").close is True
    options = parse_cluster_line("--from t_cluster --wait 0")
    assert options.kind == "adopted" and options.cluster_name == "t_cluster" and options.start_wait == 0


class NotQuite:
    scheduler_address = "tcp://127.0.0.1:1"

    def scale(self, n: int) -> None: ...


@pytest.mark.parametrize(
    ("value", "said"),
    [
        (42, "t_c (int) is not a Dask cluster manager (it lacks scheduler_address, scale, adapt, close)"),
        (NotQuite(), "t_c (NotQuite) is not a Dask cluster manager (it lacks adapt, close)"),
    ],
)
def test_from_something_that_is_not_a_cluster_manager(value: object, said: str) -> None:
    with pytest.raises(UsageError) as caught:
        adopt("t_c", {"t_c": value})
    assert str(caught.value) == f"%gpucluster --from t_c: {said}; give a cluster object such as SLURMCluster, " + (
        "KubeCluster, GatewayCluster or LocalCluster"
    )


def test_from_a_name_the_notebook_lacks() -> None:
    with pytest.raises(UsageError, match="no variable 't_c' in this notebook"):
        adopt("t_c", {})


def test_a_record_keeps_the_manager_its_jobs_and_adapt_bounds() -> None:
    from gpu_magics.cluster.info import JobInfo
    from gpu_magics.cluster.records.record import SCHEMA_VERSION, ClusterRecord

    job = JobInfo(job_id="12", state="running", node="gpu-1", workers=("s-0",), gpus=("H100 (gpu-1 · GPU 0)",))
    record = ClusterRecord(
        name="s", scheduler_address="tcp://10.0.0.1:8786", dashboard_url=None, kind="slurm", workers=1,
        manager="SLURM jobs", jobs=(job.to_json(),), adaptive=(0, 4),
    )  # fmt: skip
    data = record.to_json()
    assert data["version"] == SCHEMA_VERSION == 6 and data["adaptive"] == [0, 4] and data["jobs"][0]["node"] == "gpu-1"
    assert ClusterRecord.from_json(data) == record
    older = {key: value for key, value in data.items() if key not in ("manager", "jobs", "adaptive")}
    assert ClusterRecord.from_json(older) == ClusterRecord(
        **{**vars(record), "manager": None, "jobs": (), "adaptive": None}
    )


def test_help_names_the_managers() -> None:
    from gpu_magics.magics.gpucluster import ClusterMagics

    doc = ClusterMagics.gpucluster.__doc__ or ""
    for option in ("--slurm", "--jobs N", "--gpus-per-job G", "--cpu-workers K", "--partition", "--account",
                   "--walltime", "--job-option", "--interface", "--wait SECONDS", "--from NAME",
                   "stop [--close|--keep]", "--gateway [ADDRESS]", "--gateway-option KEY=VALUE", "--workers N",
                   "--list", "--connect NAME", "gpu-magics[gateway]", "adapt MIN MAX", "gpu-magics[hpc]"):  # fmt: skip
        assert option in doc, option


def test_the_status_shows_each_job_and_the_adapt_bounds() -> None:
    from gpu_magics.cluster.info import ClusterInfo, JobInfo
    from gpu_magics.cluster.managers.adopted import AdoptedManager
    from gpu_magics.cluster.managers.slurm.manager import SlurmManager
    from gpu_magics.cluster.options import parse_cluster_line
    from gpu_magics.display.cluster_view import ClusterView

    slurm = SlurmManager(parse_cluster_line("--slurm")).facts("gpu")
    info = ClusterInfo(
        name="s", kind="slurm", scheduler_address="tcp://10.0.0.1:8786", dashboard_url=None, hardware="2x H100",
        started_at=100.0, adaptive=(0, 4), manager="SLURM jobs", facts=slurm,
        jobs=(
            JobInfo(job_id="12", state="running", node="gpu-1", workers=("s-0",), gpus=("H100 (gpu-1 · GPU 0)",)),
            JobInfo(job_id="13", state="pending", reason="<Resources>"),
        ),
    )  # fmt: skip
    view = ClusterView(info, now=160.0)
    text = view.text()
    assert "Cluster 's': 2x H100, from SLURM jobs" in text
    assert "no workers · up since " in text and " · adapts between 0 and 4 workers" in text
    assert "job 12 running on gpu-1 · workers s-0 · GPUs H100 (gpu-1 · GPU 0)" in text
    assert "job 13 pending (<Resources>)" in text
    assert "job 13 pending (&lt;Resources&gt;)" in view.html()
    facts = AdoptedManager(None, "KubeCluster").facts("gpu")
    adopted = ClusterView(
        ClusterInfo(**{**vars(info), "kind": "adopted", "manager": "KubeCluster", "jobs": (), "facts": facts})
    )
    assert "adopted KubeCluster, not started here" in adopted.text()
