"""Parsing the ``%gpucluster`` line: pure, no cluster started."""

from __future__ import annotations

import pytest
from IPython.core.error import UsageError

from gpu_magics.cluster.options import (
    CPU_WORKER_THREADS,
    DEFAULT_ATTACH_TIMEOUT,
    GPU_WORKER_THREADS,
    ClusterOptions,
    GatewayOptions,
    LocalOptions,
    SlurmOptions,
    parse_cluster_line,
)


def test_bare_line_starts_gpu_workers_on_localhost() -> None:
    options = parse_cluster_line("")
    assert options == ClusterOptions()
    assert options.action == "start" and options.kind == "gpu"
    assert options.host == "127.0.0.1" and options.dashboard and options.protocol == "tcp"
    assert options.local.gpus is None and options.worker_threads(gpu=True) == GPU_WORKER_THREADS
    assert options.cluster_name == "gpu"


def test_gpu_options() -> None:
    options = parse_cluster_line(
        "start --gpus 0,2,3 --threads-per-worker 2 --device-memory-limit 10GB --rmm-pool-size 0.5 "
        "--protocol ucx --no-dashboard --name big --client c --replace --host 0.0.0.0"
    )
    assert options.local.gpus == (0, 2, 3)
    assert options.worker_threads(gpu=True) == options.worker_threads(gpu=False) == 2
    assert options.local.device_memory_limit == 10 * 10**9
    assert options.local.rmm_pool_size == 0.5
    assert options.protocol == "ucx" and not options.dashboard
    assert options.cluster_name == "big" and options.client_name == "c" and options.replace
    assert options.host == "0.0.0.0"
    assert parse_cluster_line("--gpus all").local.gpus is None
    assert parse_cluster_line("--device-memory-limit 512MiB").local.device_memory_limit == 512 * 2**20


def test_cpu_workers_and_attach() -> None:
    cpu = parse_cluster_line("--cpu-workers 3")
    assert cpu.kind == "cpu" and cpu.cpu_workers == 3 and cpu.worker_threads(gpu=False) == CPU_WORKER_THREADS
    attached = parse_cluster_line("--address 10.0.0.5:8786")
    assert attached.kind == "attached" and attached.address == "tcp://10.0.0.5:8786"
    assert attached.start_timeout == DEFAULT_ATTACH_TIMEOUT
    assert parse_cluster_line("--address tls://sched:8786 --timeout 2.5").start_timeout == 2.5
    assert parse_cluster_line("--cpu-workers 1 --timeout 5m").start_timeout == 300.0  # seconds, or with a unit
    assert parse_cluster_line("--cpu-workers 1 --timeout 90s").start_timeout == 90.0


@pytest.mark.parametrize(
    ("line", "action", "count"),
    [
        ("status", "status", None),
        ("stop", "stop", None),
        ("restart", "restart", None),
        ("scale 3", "scale", 3),
        ("dashboard", "dashboard", None),
        ("STOP", "stop", None),
    ],
)
def test_actions(line: str, action: str, count: int | None) -> None:
    options = parse_cluster_line(line)
    assert options.action == action and options.scale_to == count


BAD_LINES = {
    "--device-memory-limit 12XB": "invalid size '12XB'",
    "--rmm-pool-size 100B": "under 1 MiB",
    "--rmm-pool-size 100": "a share of each GPU's memory, from 0 to 1",
    "--device-memory-limit 1.5": "a share of each GPU's memory, from 0 to 1",
    "--cpu-workers -1": "at least 1, got -1",
    "--cpu-workers 0": "at least 1, got 0",
    "--threads-per-worker 0": "at least 1, got 0",
    "--gpus 0,x": "invalid GPU list",
    "--gpus 1,1": "named twice",
    "--gpus 0,,1": "'0,,1' has an empty entry: separate GPU indices with single commas",
    "--gpus 0,": "has an empty entry",
    "--protocol udp": "invalid choice: 'udp'",
    "--address nobody": "invalid scheduler address",
    "--address http://host:1": "invalid scheduler address",
    "--timeout 0": "above 0",
    "--name 'a b'": "invalid name",
    "--client 2fast": "invalid variable name",
    "--client class": "invalid variable name",
    "--client print": "invalid variable name 'print': it would hide Python's built-in print; choose another",
    "--client 'my client'": "invalid variable name 'my client': it is not a valid Python name",
    "--timeout 1e12": "expected a timeout of at most 24h (86400 s), got 1e12",
    "--timeout soon": "expected seconds (90) or a number and a unit (90s, 5m, 2h), got 'soon'",
    "--turbo": "unrecognized arguments: --turbo (valid options: --gpus, --cpu-workers",
    "--name 'open": "No closing quotation",
    "launch": "unknown action 'launch'; choose one of start, status, stop, restart, scale N, dashboard",
    "scale": "give the number of workers",
    "scale -2": "at least 1 worker, got -2",
    "scale two": "expected a whole number of workers, got 'two'",
    "scale 2 3": "give the number of workers",
    "stop now": "unexpected 'now'",
    "scale 2 --gpus 1": "--gpus belongs to start, not to scale",
    "--cpu-workers 2 --gpus 0": "--gpus belongs to GPU clusters, not to --cpu-workers",
    "--address tcp://h:1 --rmm-pool-size 1GB": "--rmm-pool-size belongs to GPU clusters, not to --address",
    "--address tcp://h:1 --cpu-workers 2": "choose one of --cpu-workers N",
    "--address tcp://h:1 --threads-per-worker 2": "takes only --name, --client, --timeout, --idle-timeout and",
    "--gpus free:0": "invalid GPU choice 'free:0': use free, or free:N with N at least 1",
    "--gpus free:two": "use free, or free:N",
    "--gpus freest": "invalid GPU list 'freest': use all, free, free:N or indices",
    "--cpu-workers 2 --gpus free": "--gpus belongs to GPU clusters, not to --cpu-workers",
    "--idle-timeout 30": "invalid duration '30': use a number and a unit (90s, 30m, 2h) or off",
    "--idle-timeout 0.2s": "at least 1s, or off",
    "--idle-timeout soon": "invalid duration 'soon'",
    "--idle-timeout -3m": "invalid duration '-3m': it must be positive (90s, 30m, 2h) or off",
    "--idle-timeout -0.5h --cpu-workers 1": "invalid duration '-0.5h': it must be positive",
    "--timeout -1.5": "expected a number above 0, got -1.5",
    "--jobs 2 --partition gpu": "--jobs, --partition belong to --slurm",
    "status --idle-timeout 5m": "--idle-timeout belongs to start, not to status",
    "free everything": "choose kernel, workers or all (the default), not 'everything'",
    "free kernel workers": "unexpected 'kernel workers'",
}


@pytest.mark.parametrize("line", list(BAD_LINES))
def test_bad_lines_are_one_line_usage_errors(line: str) -> None:
    with pytest.raises(UsageError) as caught:
        parse_cluster_line(line)
    message = str(caught.value)
    assert BAD_LINES[line] in message
    assert "\n" not in message
    assert message.startswith("%gpucluster")


def test_free_gpus_idle_timeout_and_free_parse() -> None:
    assert parse_cluster_line("--gpus free").local.free_gpus == 0
    options = parse_cluster_line("--gpus FREE:2 --idle-timeout 30m --replace")
    assert (options.local.free_gpus, options.local.gpus, options.idle_timeout) == (2, None, 1800.0)
    assert {"gpus", "idle_timeout"} <= options.given
    assert parse_cluster_line("--idle-timeout 90s").idle_timeout == 90.0
    assert parse_cluster_line("--idle-timeout 2h").idle_timeout == 7200.0
    assert parse_cluster_line("--idle-timeout off").idle_timeout == 0.0
    assert parse_cluster_line("--address tcp://h:1 --idle-timeout 5s").idle_timeout == 5.0
    assert parse_cluster_line("--gpus 0,1").local.free_gpus is None
    for line, target in (("free", "all"), ("free kernel", "kernel"), ("free Workers", "workers")):
        options = parse_cluster_line(line)
        assert (options.action, options.free_target) == ("free", target)


def test_options_are_grouped_by_the_manager_that_reads_them() -> None:
    line = "--slurm --jobs 2 --gpus-per-job 4 --partition gpu --job-option --exclusive --threads-per-worker 2"
    slurm = parse_cluster_line(line)
    assert slurm.slurm == SlurmOptions(jobs=2, gpus_per_job=4, partition="gpu", job_options=("--exclusive",))
    assert slurm.gateway is None and slurm.local == LocalOptions() and slurm.threads_per_worker == 2
    assert slurm.given == {"slurm", "jobs", "gpus_per_job", "partition", "job_options", "threads_per_worker"}
    assert slurm.kind == "slurm"
    bare = parse_cluster_line("")
    assert bare.slurm is None and bare.gateway is None and bare.local == LocalOptions()
    assert parse_cluster_line("--gpus 1 --rmm-pool-size 0.5").local == LocalOptions(gpus=(1,), rmm_pool_size=0.5)


def test_options_are_frozen() -> None:
    options = parse_cluster_line("--cpu-workers 2")
    with pytest.raises(AttributeError):
        options.cpu_workers = 3  # type: ignore[misc]


def test_gateway_lines() -> None:
    options = parse_cluster_line("--gateway")
    assert options.kind == "gateway" and options.gateway == GatewayOptions() and options.cluster_name == "gateway"
    options = parse_cluster_line(
        "--gateway https://hub.example.org/services/dask-gateway/ --workers 4 --gateway-option worker_cores=2 "
        "--gateway-option 'image=pangeo/ml:2026' --wait 120 --name gpus"
    )
    assert options.gateway == GatewayOptions(
        address="https://hub.example.org/services/dask-gateway",
        cluster_options=(("worker_cores", "2"), ("image", "pangeo/ml:2026")),
        workers=4,
    )
    assert options.start_wait == 120 and options.cluster_name == "gpus"
    listed = parse_cluster_line("--gateway --list")
    assert listed.gateway == GatewayOptions(list_clusters=True) and listed.kind == "gateway"
    connect = parse_cluster_line("--gateway --connect default.3f2a9c --workers 2")
    assert connect.gateway == GatewayOptions(connect_name="default.3f2a9c", workers=2)
    assert connect.cluster_name == "default.3f2a9c"
    assert parse_cluster_line("stop --keep").keep
    long = parse_cluster_line("--gateway --connect default.5b4e57c3f8a1429b9d4a7e0c2f6b8d1e")
    assert long.gateway == GatewayOptions(connect_name="default.5b4e57c3f8a1429b9d4a7e0c2f6b8d1e")  # its full name
    assert long.cluster_name == "default.5b4e57c3"  # the card and the side panel name it short
    assert (
        parse_cluster_line("--gateway --connect default.5b4e57c3f8a1429b9d4a7e0c2f6b8d1e --name gw").cluster_name
        == "gw"
    )


@pytest.mark.parametrize(
    ("line", "says"),
    [
        ("--gateway stop", "invalid gateway address 'stop'"),
        ("--gateway-option a=1", "--gateway-option belongs to --gateway"),
        ("--workers 2", "--workers belongs to --gateway"),
        ("--gateway --gateway-option novalue", "use KEY=VALUE"),
        ("--gateway --cpu-workers 2", "--cpu-workers belongs to clusters started here"),
        ("--gateway --gpus 0", "--gpus belongs to GPU clusters, not to --gateway"),
        ("--gateway --slurm", "choose one of --slurm"),
        ("--gateway --list --workers 2", "--gateway --list: only lists; --workers goes with a start"),
        ("--gateway --list --workers 2 --name a", "--gateway --list: only lists; --name, --workers go with a start"),
        ("--list", "%gpucluster: --list belongs to --gateway"),
        (
            "--gateway --cpu-workers 2",
            "KEY=VALUE (%gpucluster --gateway --list lists the options it offers)",
        ),
        (
            "--gateway http://gw.example.org:8000 --protocol ucx --threads-per-worker 2",
            "--protocol, --threads-per-worker belong to clusters started here; the gateway sets up its workers "
            "from its own options: give them as --gateway-option KEY=VALUE (%gpucluster --gateway "
            "http://gw.example.org:8000 --list lists the options it offers)",
        ),
        ("--gateway --connect x --gateway-option a=1", "keeps the options it was made with"),
        ("--keep", "--keep belongs to stop"),
        ("stop --keep --close", "choose one of --close"),
        ("status --gateway", "--gateway belongs to start, not to status"),
    ],
)
def test_bad_gateway_lines_are_one_line(line: str, says: str) -> None:
    with pytest.raises(UsageError) as raised:
        parse_cluster_line(line)
    assert says in str(raised.value) and "\n" not in str(raised.value)
