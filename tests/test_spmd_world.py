"""The SPMD world without a cluster: rank order, the environment each rank gets, the GPU checks, ``--ranks``, the
line's options, and how the ranks' output lines merge."""

from __future__ import annotations

from pathlib import Path

import pytest
from IPython.core.error import UsageError

from gpu_magics.gpurun.options import parse_run_line
from gpu_magics.spmd.kernel import world as worlds
from gpu_magics.spmd.kernel.view.output import LineMerger, rank_list
from gpu_magics.spmd.kernel.world import Member, World


def gpu(address: str, host: str, cuda_id: str, name: str = "") -> Member:
    return Member(address, name or address, host, f"GPU-{host}-{cuda_id}", cuda_id, "NVIDIA H100", has_torch=True)


def cpu(address: str, host: str, name: str = "", torch: bool = True) -> Member:
    return Member(address, name or address, host, has_torch=torch)


def test_ranks_are_ordered_by_host_then_gpu_and_local_ranks_count_per_host() -> None:
    members = [
        gpu("tcp://10.0.0.10:1", "10.0.0.10", "1"),
        gpu("tcp://10.0.0.9:2", "10.0.0.9", "3"),
        gpu("tcp://10.0.0.10:3", "10.0.0.10", "0"),
        gpu("tcp://10.0.0.9:4", "10.0.0.9", "2"),
    ]
    ranks = worlds.order(members)
    assert [(rank.member.host, rank.member.gpu_cuda_id) for rank in ranks] == [
        ("10.0.0.9", "2"),  # 10.0.0.9 before 10.0.0.10: addresses, not strings
        ("10.0.0.9", "3"),
        ("10.0.0.10", "0"),
        ("10.0.0.10", "1"),
    ]
    assert [(rank.rank, rank.local_rank, rank.node_rank, rank.local_world_size) for rank in ranks] == [
        (0, 0, 0, 2),
        (1, 1, 0, 2),
        (2, 0, 1, 2),
        (3, 1, 1, 2),
    ]


def test_each_gpu_rank_sees_its_hosts_gpus_in_local_rank_order_so_local_rank_is_its_own() -> None:
    members = [gpu(f"tcp://h:{i}", "h", cuda_id) for i, cuda_id in enumerate(["2", "0", "3"])]
    made = World(worlds.order(members), master_port=29511, jax_port=29512)
    for rank in made.ranks:
        env = made.env(rank)
        visible = env["CUDA_VISIBLE_DEVICES"].split(",")
        # what torch.cuda.set_device(LOCAL_RANK) picks is the worker's own GPU
        assert visible[int(env["LOCAL_RANK"])] == rank.member.gpu_uuid
    env = made.env(made.ranks[1])
    assert env["RANK"] == "1" and env["WORLD_SIZE"] == "3" and env["LOCAL_WORLD_SIZE"] == "3"
    assert env["NODE_RANK"] == "0" and env["MASTER_ADDR"] == "h" and env["MASTER_PORT"] == "29511"
    assert env["JAX_COORDINATOR_ADDRESS"] == "h:29512" and env["JAX_PROCESS_ID"] == "1"
    assert env["GPU_MAGICS_SPMD_DEVICE"] == "gpu"


def torchruns_names() -> set[str]:
    """The variables torchrun's agent gives each worker, read from the installed torch's source (the dict
    ``LocalElasticAgent._start_workers`` builds, LOCAL_RANK, and the error file its log specs add)."""
    import re

    agent = pytest.importorskip("torch.distributed.elastic.agent.server.local_elastic_agent")
    source = Path(agent.__file__).read_text()
    start = source.index("worker_env = {")
    names = set(re.findall(r'^\s*"([A-Z_]+)":', source[start : source.index("}", start)], re.MULTILINE))
    assert {"RANK", "WORLD_SIZE", "TORCHELASTIC_RUN_ID"} <= names  # the dict was found
    return names | {"LOCAL_RANK", "TORCHELASTIC_ERROR_FILE"}


def test_each_rank_gets_every_variable_torchruns_agent_sets_as_a_launched_run(monkeypatch: pytest.MonkeyPatch) -> None:
    from gpu_magics.spmd.worker.rank_env import torchrun_defaults

    monkeypatch.delenv("TORCH_NCCL_ASYNC_ERROR_HANDLING", raising=False)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    members = [gpu("tcp://a:1", "a", "0"), gpu("tcp://a:2", "a", "1"), gpu("tcp://b:1", "b", "0")]
    made = World(worlds.order(members), master_port=29511, jax_port=29512, run_id="gpu-magics-1234")
    envs = [torchrun_defaults(made.env(rank)) for rank in made.ranks]
    for env in envs:
        assert torchruns_names() <= env.keys()
        assert env["TORCHELASTIC_RUN_ID"] == "gpu-magics-1234"  # what torch.distributed.is_torchelastic_launched reads
        assert env["TORCHELASTIC_USE_AGENT_STORE"] == "False"  # no agent hosts a store: init_process_group makes it
        assert env["GROUP_WORLD_SIZE"] == "2" and env["ROLE_WORLD_SIZE"] == "3" and env["ROLE_NAME"] == "default"
        assert env["TORCHELASTIC_RESTART_COUNT"] == env["TORCHELASTIC_MAX_RESTARTS"] == "0"
        assert env["TORCH_NCCL_ASYNC_ERROR_HANDLING"] == "1" and env["TORCHELASTIC_ERROR_FILE"] == ""
    assert [env["ROLE_RANK"] for env in envs] == ["0", "1", "2"] and [env["GROUP_RANK"] for env in envs] == [
        "0",
        "0",
        "1",
    ]
    assert [env.get("OMP_NUM_THREADS") for env in envs] == ["1", "1", None]  # as torchrun: where a host runs several
    # the kernel's choice (passed on in the env) and the worker's own environment win over torchrun's defaults
    assert torchrun_defaults({"TORCH_NCCL_ASYNC_ERROR_HANDLING": "3"})["TORCH_NCCL_ASYNC_ERROR_HANDLING"] == "3"
    monkeypatch.setenv("OMP_NUM_THREADS", "4")
    assert torchrun_defaults({"LOCAL_WORLD_SIZE": "2"})["OMP_NUM_THREADS"] == "4"


def test_a_cpu_rank_sees_no_gpu_and_the_world_says_what_it_is() -> None:
    made = World(worlds.order([cpu("tcp://a:1", "a"), cpu("tcp://a:2", "a")]), 1, 2)
    assert all(made.env(rank)["CUDA_VISIBLE_DEVICES"] == "" for rank in made.ranks)
    assert made.kind == "cpu"
    assert made.describe() == "2 ranks on 1 host (CPU)"
    mixed = World(worlds.order([gpu("tcp://a:1", "a", "0"), cpu("tcp://b:1", "b")]), 1, 2)
    assert mixed.kind == "mixed" and mixed.describe() == "2 ranks on 2 hosts (1 GPU, 1 CPU)"


def test_two_workers_on_one_gpu_are_refused_in_one_line() -> None:
    ranks = worlds.order([gpu("tcp://a:1", "a", "0", "w1"), gpu("tcp://a:2", "a", "0", "w2")])
    with pytest.raises(UsageError) as caught:
        worlds.check_gpus(ranks)
    message = str(caught.value)
    assert "workers 'w1' and 'w2' share one GPU" in message and "\n" not in message
    # the same GPU index on two hosts is two GPUs
    worlds.check_gpus(worlds.order([gpu("tcp://a:1", "a", "0"), gpu("tcp://b:1", "b", "0")]))


def test_groups_need_the_framework_everywhere_and_gpus_on_every_rank() -> None:
    made = World(worlds.order([gpu("tcp://a:1", "a", "0"), cpu("tcp://a:2", "a", "cpu-worker")]), 1, 2)
    with pytest.raises(UsageError, match="rank 1 \\('cpu-worker'\\) has no GPU"):
        worlds.check_group(made, "torch", made.ranks)
    with pytest.raises(UsageError, match="jax is not installed where ranks 0, 1 run; pip install 'jax\\[cpu\\]'"):
        worlds.check_group(made, "jax", made.ranks)
    lacking = World(worlds.order([cpu("tcp://a:1", "a"), cpu("tcp://a:2", "a", torch=False)]), 1, 2)
    with pytest.raises(UsageError, match="torch is not installed where rank 1 runs; pip install torch"):
        worlds.check_group(lacking, "torch", lacking.ranks)


def test_ranks_outside_the_world_are_one_line() -> None:
    made = World(worlds.order([cpu(f"tcp://a:{i}", "a") for i in range(3)]), 1, 2)
    assert [rank.rank for rank in made.select([2, 0])] == [0, 2]
    with pytest.raises(UsageError) as caught:
        made.select([1, 5])
    assert str(caught.value) == "%%gpurun spmd --ranks: no rank 5; the world has ranks 0-2 (3 ranks on 1 host (CPU))"


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("spmd --ranks 0", (0,)),
        ("spmd --ranks 0,2", (0, 2)),
        ("spmd --ranks 1-3", (1, 2, 3)),
        ("spmd --ranks 0,2-3", (0, 2, 3)),
    ],
)
def test_rank_lists(line: str, expected: tuple[int, ...]) -> None:
    assert parse_run_line(line).ranks == expected


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("spmd --ranks 3-1", "'3-1' counts down; write 1-3"),
        ("spmd --ranks 0,0", "rank 0 is named twice in '0,0'; name each rank once"),
        ("spmd --ranks 0,2-3,2", "rank 2 is named twice in '0,2-3,2'"),
        ("spmd --ranks 0-2,1-3", "rank 1 is named twice"),
        ("spmd --timeout 1e12", "expected a timeout of at most 24h (86400 s), got 1e12"),
        ("spmd --timeout 5", "a number alone is seconds now (it was minutes): write 5m for 5 minutes"),
        ("spmd --timeout soon", "expected seconds (90) or a number and a unit (90s, 5m, 2h), got 'soon'"),
        ("spmd --timeout 0", "expected a number above 0"),
        ("spmd --ranks x", "expected ranks such as 0, 0,2 or 1-3"),
        ("spmd --init tensorflow", "expected torch or jax"),
        ("gpu --ranks 0", "%%gpurun: --ranks is for spmd cells"),
        ("multi-gpu --init torch", "%%gpurun: --init is for spmd cells"),
        ("cpu-threads --reset", "%%gpurun: --reset is for spmd cells"),
        ("spmd --device 0", "%%gpurun spmd: no --device: each rank computes on its worker's own GPU."),
        ("spmd --workers 2", "%%gpurun spmd: no --workers: every worker of the cluster is a rank"),
        ("spmd --repeat 3", "%%gpurun spmd: no --repeat"),
        ("--compare gpu,spmd", "--compare runs dask backends"),
        ("spmd --output res", "--output: takes ranks (0, 0,2 or 1-3), not 'res': -o res keeps the result"),
        ("spmd --output 2-1", "'2-1' counts down; write 1-2"),
        ("gpu --output 0", "%%gpurun: --output is for spmd cells"),
    ],
)
def test_options_that_make_no_sense_are_one_line(line: str, message: str) -> None:
    with pytest.raises(UsageError) as caught:
        parse_run_line(line)
    assert message in str(caught.value) and "\n" not in str(caught.value)


def test_output_names_the_ranks_shown_live_and_o_keeps_the_result() -> None:
    options = parse_run_line("spmd --output 0,2 -o res")
    assert (options.show_ranks, options.output) == ((0, 2), "res")
    assert parse_run_line("spmd").show_ranks is None


@pytest.mark.parametrize(
    ("text", "seconds"), [("90", 90.0), ("60", 60.0), ("90s", 90.0), ("5m", 300.0), ("2h", 7200.0)]
)
def test_spmd_timeout_is_seconds_or_has_its_unit(text: str, seconds: float) -> None:
    assert parse_run_line(f"spmd --timeout {text}").timeout_s == seconds


def test_spmd_options_parse() -> None:
    options = parse_run_line("spmd --init TORCH --timeout 2.5m --reset -o res -q")
    assert (options.spmd, options.init, options.timeout_s, options.reset, options.output, options.quiet) == (
        True,
        "torch",
        150.0,
        True,
        "res",
        True,
    )


def test_rank_list_text() -> None:
    assert [rank_list(r) for r in ([0, 1, 2, 3], [0, 2], [2, 0, 1, 5], [4])] == ["0-3", "0,2", "0-2,5", "4"]


def lines(*texts: str, stream: str = "out", start: int = 0) -> list[tuple[int, str, str]]:
    return [(start + i, stream, text) for i, text in enumerate(texts)]


def test_alike_lines_show_once_with_their_ranks_and_differing_lines_with_theirs() -> None:
    merger = LineMerger([0, 1, 2, 3], hold=10.0)
    for rank in range(4):
        merger.add(rank, lines("epoch 1", f"loss {0.5 if rank < 2 else 0.6}"), now=0.0)
    shown = [(line.stream, line.text) for line in merger.ready(now=0.1)]
    assert shown == [("out", "[0-3] epoch 1"), ("out", "[0,1] loss 0.5"), ("out", "[2,3] loss 0.6")]
    assert merger.ready(now=0.2) == []


def test_a_line_waits_for_the_other_ranks_then_shows_alone_after_the_hold() -> None:
    merger = LineMerger([0, 1], hold=0.3)
    merger.add(0, lines("step 1"), now=0.0)
    assert merger.ready(now=0.1) == []  # rank 1 may print the same line
    assert [line.text for line in merger.ready(now=0.31)] == ["[0] step 1"]
    merger.add(1, lines("step 1"), now=0.5)  # late: shows with its own rank, once
    assert [line.text for line in merger.ready(now=0.5)] == ["[1] step 1"]


def test_finished_ranks_are_not_waited_for_and_lines_are_taken_once() -> None:
    merger = LineMerger([0, 1], hold=10.0)
    merger.add(0, lines("only rank 0"), now=0.0)
    merger.add(0, lines("only rank 0"), now=0.0)  # the same line again (the event and the reply both carry it)
    merger.finished(1)
    assert [line.text for line in merger.ready(now=0.0)] == ["[0] only rank 0"]
    merger.add(1, lines("warning", stream="err"), now=1.0)
    assert [(line.stream, line.text) for line in merger.flush()] == [("err", "[1] warning")]


def test_the_status_rows_show_a_gpu_column_only_where_a_rank_has_a_gpu() -> None:
    from gpu_magics.spmd.kernel.view.results import RankOutcome, RankState, StatusView

    outcomes = [
        RankOutcome(0, "a · CPU", RankState.DONE, seconds=0.01),
        RankOutcome(1, "a · CPU", RankState.DONE, seconds=0.02),
    ]
    cpu = StatusView("2 ranks on 1 host (CPU)", outcomes, 0.03, finished=True, gpus=False)
    assert "GPU util" not in repr(cpu) and "GPU util" not in cpu._repr_html_()
    assert "2 done in 30.0 ms" in repr(cpu)
    gpu = StatusView("2 ranks on 1 host (2 GPUs)", outcomes, 0.03, finished=True, gpus=True)
    assert "GPU util" in repr(gpu) and "GPU util" in gpu._repr_html_()
