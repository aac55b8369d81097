"""SPMD cells on a real cluster (``%gpucluster --cpu-workers 3``: real worker processes, each with its rank
process) from a real IPython shell: the rank environment, variables kept per rank, ``--ranks``, merged output,
results, values moved both ways, failures that stop every rank (one stuck where an interrupt cannot reach it),
real process groups (torch's gloo with DDP and a DataLoader with worker processes, JAX's gloo collectives), the
SPMD session, and bad input in one line."""

from __future__ import annotations

import importlib.util
import os
import re
import time
from collections.abc import Iterator
from typing import Any

import psutil
import pytest
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output

from gpu_magics import spmd
from gpu_magics.cluster.control import queries
from gpu_magics.spmd.kernel import ranks as rank_sets
from gpu_magics.spmd.worker import host
from tests.display_recording import final_frames
from tests.free_ports import free_port
from tests.interrupting import interrupt_when, shows
from tests.test_gpurun import NO_GPU, inventory
from tests.waiting import wait_for

pytestmark = pytest.mark.slow

HAS_TORCH = importlib.util.find_spec("torch") is not None
HAS_JAX = importlib.util.find_spec("jax") is not None


@pytest.fixture(scope="module")
def shell(loaded_shell: InteractiveShell) -> Iterator[InteractiveShell]:
    with inventory(NO_GPU), capture_output():
        loaded_shell.run_line_magic("gpucluster", "--cpu-workers 3 --name spmd")
    try:
        yield loaded_shell
    finally:
        with capture_output():
            loaded_shell.run_line_magic("gpucluster", "stop")


def spmd_cell(shell: InteractiveShell, line: str, body: str) -> tuple[Any, str, str, Any]:
    """Run ``%%gpurun spmd LINE`` as a cell (as the notebook does); its value, stdout (with the text of what it
    displayed, each output as the cell left it: a live table's last frame) and stderr, and its result."""
    with capture_output() as captured:
        result = shell.run_cell(f"%%gpurun spmd {line}\n{body}")
    return result.result, captured.stdout + "\n".join(final_frames(captured.outputs)), captured.stderr, result


def final_table(outputs: list[Any]) -> str:
    """The status table as the cell left it (its last frame)."""
    tables = [text for text in final_frames(outputs) if text.startswith("spmd · ")]
    assert len(tables) == 1, tables
    return tables[0]


def rank_processes() -> dict[str, dict[str, int]]:
    """Worker address -> owner -> pid of its rank process."""
    return dict(queries.require_client().run(host.rank_pids))


def rank_keepers() -> dict[str, tuple[str, ...]]:
    """Worker address -> the rank keepers among its plugins."""

    def keepers(dask_worker: Any) -> tuple[str, ...]:
        return tuple(sorted(name for name in dask_worker.plugins if name.startswith(host.PLUGIN_PREFIX)))

    return dict(queries.require_client().run(keepers))


def scheduler_plugins() -> list[str]:
    """The worker plugins the scheduler gives every worker that joins."""
    return list(queries.require_client().run_on_scheduler(lambda dask_scheduler: list(dask_scheduler.worker_plugins)))


def test_every_rank_gets_torchruns_environment_and_rank_0s_value_is_the_result(shell: InteractiveShell) -> None:
    body = (
        "import os\n"
        "env = {k: os.environ[k] for k in ('RANK', 'LOCAL_RANK', 'WORLD_SIZE', 'LOCAL_WORLD_SIZE', 'NODE_RANK',\n"
        "       'MASTER_ADDR', 'MASTER_PORT', 'JAX_COORDINATOR_ADDRESS', 'CUDA_VISIBLE_DEVICES')}\n"
        "env"
    )
    value, _, _, _ = spmd_cell(shell, "-q -o t_env", body)
    result = shell.user_ns["t_env"]
    envs = result.values
    assert [env["RANK"] for env in envs] == ["0", "1", "2"] and value == envs[0]
    assert {env["WORLD_SIZE"] for env in envs} == {"3"} and {env["LOCAL_WORLD_SIZE"] for env in envs} == {"3"}
    assert [env["LOCAL_RANK"] for env in envs] == ["0", "1", "2"] and {env["NODE_RANK"] for env in envs} == {"0"}
    assert {env["MASTER_ADDR"] for env in envs} == {"127.0.0.1"}
    master_port, jax_port = int(envs[0]["MASTER_PORT"]), int(envs[0]["JAX_COORDINATOR_ADDRESS"].rsplit(":", 1)[1])
    assert master_port != jax_port and master_port > 1024 and {env["CUDA_VISIBLE_DEVICES"] for env in envs} == {""}
    assert "rank 2: {" in repr(result) and result[1].seconds is not None


TORCHRUN_SAME = (  # torchrun's variables whose values a run of 3 processes on one host gives alike
    "RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE", "ROLE_NAME",
    "ROLE_RANK", "ROLE_WORLD_SIZE", "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_MAX_RESTARTS",
    "TORCH_NCCL_ASYNC_ERROR_HANDLING", "OMP_NUM_THREADS", "TORCHELASTIC_SIGNALS_TO_HANDLE",
)  # fmt: skip


@pytest.mark.skipif(not HAS_TORCH, reason="torch is not installed (pip install torch)")
def test_the_ranks_have_every_variable_a_real_torchrun_gives_its_workers(
    shell: InteractiveShell, tmp_path: Any
) -> None:
    import json
    import subprocess
    import sys

    script = tmp_path / "env.py"  # a file each: three processes' prints on one pipe can interleave
    script.write_text(
        "import json, os, pathlib\n"
        f"out = pathlib.Path({str(tmp_path)!r}, 'env-' + os.environ['RANK'] + '.json')\n"
        "out.write_text(json.dumps(dict(os.environ)))\n"
    )
    launcher = {
        name: value
        for name, value in os.environ.items()
        if name not in TORCHRUN_SAME and not name.startswith(("TORCHELASTIC_", "MASTER_"))
    }
    port = free_port()  # as the ranks' own are drawn
    subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=3", f"--master_port={port}", str(script)],
        env=launcher, capture_output=True, text=True, timeout=300, check=True,
    )  # fmt: skip
    workers = [json.loads((tmp_path / f"env-{rank}.json").read_text()) for rank in range(3)]
    assert len(workers) == 3
    torchruns = set().union(*(env.keys() - launcher.keys() for env in workers))
    assert {"TORCHELASTIC_RUN_ID", "ROLE_NAME", "TORCHELASTIC_ERROR_FILE", "OMP_NUM_THREADS"} <= torchruns
    spmd_cell(shell, "-q -o t_all_env", "import os\ndict(os.environ)")
    ranks = shell.user_ns["t_all_env"].values
    for rank, torchrun_worker in zip(ranks, workers, strict=True):
        assert torchruns - rank.keys() == set()
        assert {name: rank[name] for name in TORCHRUN_SAME} == {name: torchrun_worker[name] for name in TORCHRUN_SAME}
        # the documented differences: no agent hosts a store, and the run's id is this world's
        assert rank["TORCHELASTIC_USE_AGENT_STORE"] == "False" and rank["TORCHELASTIC_RUN_ID"].startswith("gpu-magics-")
    lightning = (
        "from lightning.fabric.plugins.environments import TorchElasticEnvironment\nTorchElasticEnvironment.detect()"
    )
    if importlib.util.find_spec("lightning") is not None:
        assert spmd_cell(shell, "-q -o t_detected", lightning)[0] is True
        assert shell.user_ns["t_detected"].values == [True, True, True]


def test_each_rank_keeps_its_variables_and_ranks_picks_some(shell: InteractiveShell) -> None:
    spmd_cell(shell, "-q", "import os\nmine = int(os.environ['RANK']) * 10")
    value, _, _, _ = spmd_cell(shell, "-q --ranks 1-2 -o t_some", "mine + 1")
    assert value == 11  # the first chosen rank's value
    assert [outcome.rank for outcome in shell.user_ns["t_some"].outcomes] == [1, 2]
    assert spmd.pull("mine") == [0, 10, 20] and spmd.pull("mine", rank=2) == 20


def test_alike_lines_show_once_and_stderr_stays_stderr(shell: InteractiveShell) -> None:
    body = "import os, sys\nprint('epoch 1')\nprint('rank says', os.environ['RANK'])\nprint('careful', file=sys.stderr)"
    _, out, err, _ = spmd_cell(shell, "", body)
    assert "[0-2] epoch 1" in out and out.count("epoch 1") == 1
    assert all(f"[{rank}] rank says {rank}" in out for rank in range(3))
    assert "[0-2] careful" in err and "careful" not in out
    assert "spmd · 3 ranks on 1 host (CPU) · 3 done in" in out  # the status rows


@pytest.mark.skipif(importlib.util.find_spec("tqdm") is None, reason="tqdm is not installed (pip install tqdm)")
def test_a_tqdm_bar_keeps_one_labelled_line_per_rank_live_and_after(shell: InteractiveShell) -> None:
    body = "import time\nfrom tqdm import tqdm\nfor _ in tqdm(range(200)):\n    time.sleep(0.01)\n"
    with capture_output() as captured:
        result = shell.run_cell(f"%%gpurun spmd -q\n{body}")
    assert result.success, captured.stdout + captured.stderr
    assert "\r" not in captured.stderr  # no line left for a carriage return to unlabel
    assert "/200" not in captured.stderr  # a finished bar stays with the bars, not in the pink stderr block
    views = [output.data["text/plain"] for output in captured.outputs if "/200" in output.data.get("text/plain", "")]
    assert views, "no progress was shown while the bars ran"
    assert all(line.startswith("[") for text in views for line in text.splitlines())
    finished = views[-1].splitlines()  # the bars' view as the cell left it: each rank's finished bar
    assert all("200/200" in line for line in finished), finished
    ranks = sorted(rank for line in finished for rank in _ranks_of(line.split("]", 1)[0] + "]"))
    assert ranks == [0, 1, 2], finished  # one finished line per rank (alike ones merged)
    kept = [text for text in final_frames(captured.outputs) if "/200" in text]  # the bars as the cell left them
    assert kept and all("200/200" in line for line in kept[-1].splitlines()), kept


def _ranks_of(label: str) -> list[int]:
    found: list[int] = []
    for part in label.strip("[]").split(","):
        low, _, high = part.partition("-")
        found.extend(range(int(low), int(high or low) + 1))
    return found


def test_output_shows_rank_0_live_and_folds_the_others_into_a_block(shell: InteractiveShell) -> None:
    body = "import os\nprint('all ranks')\nprint('mine', os.environ['RANK'])"
    with capture_output() as captured:
        result = shell.run_cell(f"%%gpurun spmd -q --output 0\n{body}")
    assert result.success, captured.stdout + captured.stderr
    assert "[0-2] all ranks" in captured.stdout and "[0] mine 0" in captured.stdout
    assert "mine 1" not in captured.stdout and "mine 2" not in captured.stdout
    (folded,) = [output for output in captured.outputs if "not shown live" in output.data.get("text/plain", "")]
    assert "[1] mine 1" in folded.data["text/plain"] and "[2] mine 2" in folded.data["text/plain"]
    with pytest.raises(UsageError) as caught:
        shell.run_cell_magic("gpurun", "spmd --output 9", "print('never')")
    assert str(caught.value) == "%%gpurun spmd --output: no rank 9; the world has ranks 0-2 (3 ranks on 1 host (CPU))"


def test_values_go_to_every_rank_and_come_back(shell: InteractiveShell) -> None:
    def scale(x: int) -> int:  # a function made here travels by value
        return x * 3

    spmd.push(t_scale=scale, t_base=7)
    value, _, _, _ = spmd_cell(shell, "-q -o t_pushed", "import os\nt_scale(t_base) + int(os.environ['RANK'])")
    assert shell.user_ns["t_pushed"].values == [21, 22, 23] and value == 21
    with pytest.raises(UsageError, match=r"spmd\.pull: rank 0: KeyError: 'nothing_here'"):
        spmd.pull("nothing_here", rank=0)


NOT_A_RANK: Any = "0"
NOT_RANKS: Any = "x"


def test_pull_and_push_errors_name_their_own_arguments(shell: InteractiveShell) -> None:
    for call, message in [
        (lambda: spmd.pull("y", rank=5), "spmd.pull('y', rank=5): no rank 5; the world has ranks 0-2 (3 ranks"),
        (lambda: spmd.pull("y", rank=NOT_A_RANK), "spmd.pull: rank='0' is not a rank number"),
        (lambda: spmd.push(ranks=[0, 7], t_x=1), "spmd.push(ranks=[0, 7]): no rank 7; the world has ranks 0-2"),
        (lambda: spmd.push(ranks=NOT_RANKS, t_x=1), "spmd.push: ranks='x' is not a rank number or a list of them"),
    ]:
        with pytest.raises(UsageError) as caught:
            call()
        assert str(caught.value).startswith(message) and "--ranks" not in str(caught.value)
        assert "\n" not in str(caught.value)


def test_an_init_cell_shows_one_status_table_with_the_group_as_a_line_of_it(shell: InteractiveShell) -> None:
    if not HAS_TORCH:
        pytest.skip("torch is not installed (pip install torch)")
    with capture_output():
        shell.run_line_magic("gpurun", "spmd --reset")
    with capture_output() as captured:
        result = shell.run_cell("%%gpurun spmd --init torch\nimport torch.distributed as dist\ndist.get_rank()")
    assert result.success and result.result == 0
    tables = [output for output in captured.outputs if "spmd · 3 ranks" in output.data.get("text/plain", "")]
    assert len([output for output in tables if not output.update]) == 1  # one table, updated in place
    final = final_table(captured.outputs).splitlines()
    assert final[0].startswith("spmd · 3 ranks on 1 host (CPU) · 3 done in")
    assert final[1].startswith("  torch.distributed: gloo group of 3 made in "), final
    assert "gloo group" not in captured.stdout  # not said a second time


def test_a_package_the_ranks_lack_is_one_line_naming_the_ranks_and_the_pip_command(shell: InteractiveShell) -> None:
    _, out, err, result = spmd_cell(shell, "-q", "import gpu_magics_no_such_package")
    assert not result.success and type(result.error_in_exec).__name__ == "ModuleNotFoundError"
    text = out + err
    package = "gpu_magics_no_such_package"
    # every rank fails alike (one whose message came after the first failure was stopped: it is named as such)
    assert re.search(rf"{package} is not installed where ranks? [0-9,-]+ runs?: pip install {package} in the", text)
    assert "Traceback" not in text and "failed first" not in text


def test_a_failing_rank_stops_the_others_even_one_an_interrupt_cannot_reach(
    shell: InteractiveShell, tmp_path: Any
) -> None:
    spmd_cell(shell, "-q", "keep = 'kept'")
    body = (  # rank 1 fails once the others are in their sleep (each leaves a mark), rank 2 deaf to an interrupt
        "import os, pathlib, signal, time\n"
        f"rank, marks = int(os.environ['RANK']), pathlib.Path({str(tmp_path)!r})\n"
        "if rank == 2:\n"
        "    signal.signal(signal.SIGINT, signal.SIG_IGN)  # as a rank stuck in a collective's C code\n"
        "if rank == 1:\n"
        "    deadline = time.monotonic() + 120\n"
        "    while not all((marks / f'rank-{r}').exists() for r in (0, 2)) and time.monotonic() < deadline:\n"
        "        time.sleep(0.05)\n"
        "    raise ValueError('boom on rank 1')\n"
        "(marks / f'rank-{rank}').touch()\n"
        "time.sleep(300)\n"
    )
    before = rank_processes()
    began = time.monotonic()
    _, out, err, result = spmd_cell(shell, "", body)
    took = time.monotonic() - began
    # the others were stopped (rank 2 ended after its grace), not waited for (300 s): a bound far from both
    assert took < 150, f"the cell took {took:.1f} s"
    assert not result.success and type(result.error_in_exec).__name__ == "ValueError"
    text = out + err
    assert "rank 1 (127.0.0.1 · CPU) failed first:" in text and "ValueError: boom on rank 1" in text
    assert 'File "<rank cell' in text and "repl.py" not in text  # the rank's own frames only
    assert "rank 0: stopped" in text
    assert "rank 2: its process was ended" in text and "rank 2 did not stop within 3 s and was ended" in text
    # the next cell starts new ranks: variables are gone, but the cell works
    value, _, _, _ = spmd_cell(shell, "-q", "'keep' in globals()")
    assert value is False
    after = rank_processes()
    owner = rank_sets.current().owner  # type: ignore[union-attr]
    assert {pids[owner] for pids in after.values()}.isdisjoint({pids.get(owner) for pids in before.values()})


def test_a_rank_that_makes_no_progress_is_named_with_where_it_waits(shell: InteractiveShell) -> None:
    shell.run_line_magic("config", "GpuMagics.spmd_stall_s = 1.0")
    try:
        body = (
            "import os, time\n"
            "def waiting_here():\n"
            "    time.sleep(3.5 if os.environ['RANK'] == '0' else 0)\n"
            "waiting_here()"
        )
        with capture_output() as captured:
            shell.run_cell(f"%%gpurun spmd\n{body}")
    finally:
        shell.run_line_magic("config", "GpuMagics.spmd_stall_s = 30.0")
    updates = [output.data.get("text/plain", "") for output in captured.outputs]
    assert any("no output for" in text and "cell line 3, in waiting_here" in text for text in updates), updates


def test_syntax_errors_and_ranks_outside_the_world_are_one_line_and_run_nothing(shell: InteractiveShell) -> None:
    for line, body, message in [
        ("", "def broken(:\n", "%%gpurun spmd: the cell does not parse (line 1"),
        ("--ranks 7", "x = 1", "%%gpurun spmd --ranks: no rank 7; the world has ranks 0-2"),
    ]:
        with pytest.raises(UsageError) as caught:
            shell.run_cell_magic("gpurun", f"spmd {line}", body)
        assert str(caught.value).startswith(message) and "\n" not in str(caught.value)


def test_the_session_line_refuses_ranks_outside_the_world_and_says_which_ranks(shell: InteractiveShell) -> None:
    from gpu_magics.gpurun.session import plain_cells

    def spmd_on() -> bool:
        made = plain_cells.current(shell)
        return made is not None and made.spmd is not None

    spmd_cell(shell, "-q", "pass")  # the world is known
    with pytest.raises(UsageError) as caught:
        shell.run_line_magic("gpurun", "spmd --ranks 7")
    assert str(caught.value) == "%gpurun spmd --ranks: no rank 7; the world has ranks 0-2 (3 ranks on 1 host (CPU))"
    assert not spmd_on()  # nothing changed
    with pytest.raises(UsageError, match=r"^%gpurun spmd --output: no rank 9; the world has ranks 0-2 \(3 ranks"):
        shell.run_line_magic("gpurun", "spmd --output 9")
    assert not spmd_on()
    with capture_output() as captured:
        shell.run_line_magic("gpurun", "spmd --ranks 1-2")
    try:
        assert "plain cells now run as SPMD cells on ranks 1,2 of 3 (cells that begin" in captured.stdout
        assert "every worker" not in captured.stdout
        with capture_output() as captured:
            failed = shell.run_cell("def broken(:\n")  # a session's cell that fails in one line names the way out
        assert not failed.success
        assert "the cell does not parse (line 1" in captured.stderr
        assert "; %gpurun off runs plain cells in this kernel again" in captured.stderr
    finally:
        with capture_output():
            shell.run_cell("%gpurun off")


def test_the_spmd_session_runs_plain_cells_on_every_rank_until_off(shell: InteractiveShell) -> None:
    with capture_output() as captured:
        shell.run_line_magic("gpurun", "spmd")
    assert "plain cells now run as SPMD cells on every rank (3 ranks on 1 host (CPU))" in captured.stdout
    try:
        with capture_output() as captured:
            plain = shell.run_cell("import os\nprint('from', os.environ['RANK'])\nint(os.environ['WORLD_SIZE'])")
        assert plain.result == 3 and "[0] from 0" in captured.stdout and "[2] from 2" in captured.stdout
        with capture_output() as captured:
            shell.run_cell("%gpurun")
        assert "plain cells run as SPMD cells" in captured.stdout
    finally:
        with capture_output() as captured:
            shell.run_cell("%gpurun off")
    assert "plain cells run in this kernel again (not spmd)" in captured.stdout
    assert shell.run_cell("t_here = 5\nt_here").result == 5  # in the kernel again


def test_reset_ends_the_ranks_and_the_next_cell_starts_new_ones(shell: InteractiveShell) -> None:
    spmd_cell(shell, "-q", "remember = 1")
    owner = rank_sets.current().owner  # type: ignore[union-attr]
    old = {pids[owner] for pids in rank_processes().values()}
    mine = host.PLUGIN_PREFIX + owner
    assert set(rank_keepers().values()) == {(mine,)}  # each worker keeps its rank with a plugin
    assert not [name for name in scheduler_plugins() if name.startswith(host.PLUGIN_PREFIX)]  # never the scheduler
    with capture_output() as captured:
        shell.run_line_magic("gpurun", "spmd --reset")
    assert "the ranks were ended" in captured.stdout
    assert all(not psutil.pid_exists(pid) or psutil.Process(pid).status() == "zombie" for pid in old)
    assert set(rank_keepers().values()) == {()}  # the plugins went with the ranks
    value, _, _, _ = spmd_cell(shell, "-q", "'remember' in globals()")
    assert value is False


def test_cells_reach_the_ranks_on_the_cell_channel_and_a_broken_channel_falls_back(shell: InteractiveShell) -> None:
    spmd_cell(shell, "-q", "import os\nkept = int(os.environ['RANK'])")
    made = rank_sets.current()
    assert made is not None and made.world is not None
    callers = dict(made._callers)
    assert set(callers) == made.world.addresses  # one channel per rank, on this plain-TCP cluster
    asked = {address: caller._ids for address, caller in callers.items()}
    spmd_cell(shell, "-q", "kept")
    assert all(caller._ids == asked[address] + 1 for address, caller in callers.items())  # the cell went there
    loop: Any = made.client.loop
    for caller in callers.values():  # the channels break (as a connection cut between the hosts would)
        loop.asyncio_loop.call_soon_threadsafe(caller.close)
    wait_for(lambda: all(caller.broken is not None for caller in callers.values()), 60, "every channel broken")
    value, _, _, result = spmd_cell(shell, "", "kept")
    assert result.success and value == 0  # through Client.run now; the same processes, variables kept
    assert made.world is not None and set(made._callers) == made.world.addresses


def test_a_dataloader_style_pool_of_worker_processes_works_inside_a_rank(shell: InteractiveShell) -> None:
    body = (
        "import multiprocessing as mp\n"
        "with mp.get_context('fork').Pool(2) as pool:\n"
        "    got = pool.map(abs, [-1, -2])\n"
        "got"
    )
    value, _, err, result = spmd_cell(shell, "-q", body)
    assert result.success, err
    assert value == [1, 2]


@pytest.mark.skipif(not HAS_TORCH, reason="torch is not installed (pip install torch)")
def test_init_torch_makes_a_gloo_group_once_and_ddp_trains_with_a_dataloader(shell: InteractiveShell) -> None:
    with capture_output() as captured:
        result = shell.run_cell("%%gpurun spmd --init torch\nimport torch.distributed as dist\ndist.get_backend()")
    assert result.success, captured.stdout + captured.stderr
    table = final_table(captured.outputs).splitlines()  # the table as the cell left it, not a frame drawn before
    assert table[0].startswith("spmd · 3 ranks on 1 host (CPU) · 3 done in"), table
    assert table[1].startswith("  torch.distributed: gloo group of 3 made in "), table
    assert result.result == "gloo"
    body = (
        "import os, torch, torch.distributed as dist\n"
        "from torch.utils.data import DataLoader, TensorDataset\n"
        "torch.manual_seed(0)\n"
        "model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 1))\n"
        "optimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "data = TensorDataset(torch.randn(64, 4), torch.randn(64, 1))\n"
        "losses = []\n"
        "for x, y in DataLoader(data, batch_size=16, num_workers=2):\n"
        "    optimizer.zero_grad()\n"
        "    loss = torch.nn.functional.mse_loss(model(x), y)\n"
        "    loss.backward()\n"
        "    optimizer.step()\n"
        "    losses.append(loss.item())\n"
        "total = torch.ones(1)\n"
        "dist.all_reduce(total)\n"
        "(total.item(), [p.detach().sum().item() for p in model.parameters()])"
    )
    _, out, err, result = spmd_cell(shell, "--init torch -o t_ddp", body)  # the group is kept, not made again
    assert result.success, out + err
    assert "gloo group" not in out
    values = shell.user_ns["t_ddp"].values
    assert all(value[0] == 3.0 for value in values)
    assert values[0][1] == values[1][1] == values[2][1]  # DDP kept the replicas equal


@pytest.mark.skipif(not HAS_TORCH, reason="torch is not installed (pip install torch)")
def test_a_collective_only_one_rank_entered_is_named_and_its_group_made_again_keeping_variables(
    shell: InteractiveShell,
) -> None:
    # new ranks: no DDP model of an earlier test holds the group (gloo's connections close only with its last user)
    _, out, err, result = spmd_cell(shell, "--reset --init torch -q", "import os\nkept = int(os.environ['RANK'])")
    assert result.success, out + err
    before = rank_processes()
    body = (
        "import os, torch, torch.distributed as dist\n"
        "t = torch.ones(1)\n"
        "if os.environ['RANK'] == '0':\n"
        "    dist.all_reduce(t)   # ranks 1 and 2 never enter it\n"
    )
    shell.run_line_magic("config", "GpuMagics.spmd_stall_s = 1.0")
    named = r"all_reduce #\d+ \(gloo\) waits for ranks 1,2, which never entered it \(cell line 4\)"
    try:
        with capture_output() as captured, interrupt_when(shows(captured, named)):  # Ctrl-C once it is named
            result = shell.run_cell(f"%%gpurun spmd\n{body}")
    finally:
        shell.run_line_magic("config", "GpuMagics.spmd_stall_s = 30.0")
    updates = [output.data.get("text/plain", "") for output in captured.outputs]
    assert any(re.search(named, text) for text in updates), updates
    assert not result.success and isinstance(result.error_in_exec, KeyboardInterrupt)
    said = captured.stdout + captured.stderr
    assert "the next SPMD cell makes it again in the same processes, variables kept" in said, said
    assert rank_processes() == before  # no rank was ended: the interrupt reached rank 0 once the group was aborted
    _, out, err, result = spmd_cell(shell, "-o t_again", "t = torch.ones(1)\ndist.all_reduce(t)\n(kept, t.item())")
    assert result.success, out + err
    assert "the process group is made again in the same processes, now (--init torch): variables are kept" in out
    assert "torch.distributed: gloo group of 3 made again in " in out and "(made" not in out
    assert shell.user_ns["t_again"].values == [(0, 3.0), (1, 3.0), (2, 3.0)]


@pytest.mark.skipif(not HAS_TORCH, reason="torch is not installed (pip install torch)")
def test_the_first_init_torch_cells_rows_go_from_running_to_done_once(shell: InteractiveShell) -> None:
    with capture_output() as captured:
        result = shell.run_cell("%%gpurun spmd --reset --init torch\nimport time\ntime.sleep(1)\nkept = 0")
    assert result.success, captured.stdout + captured.stderr
    headlines = [
        output.data["text/plain"].splitlines()[0]
        for output in captured.outputs
        if output.data.get("text/plain", "").startswith("spmd ·")
    ]
    done = [" done " in headline for headline in headlines]
    assert done and done[-1] and done == sorted(done), headlines  # never "3 done", then "3 running"
    last = final_table(captured.outputs)
    assert "torch.distributed: gloo group of 3 made in " in last and "(made" not in last


@pytest.mark.skipif(not HAS_TORCH, reason="torch is not installed (pip install torch)")
def test_a_name_error_on_one_rank_before_any_collective_keeps_the_group(shell: InteractiveShell) -> None:
    spmd_cell(shell, "--init torch -q", "import os, time, torch, torch.distributed as dist")
    body = "if os.environ['RANK'] == '1':\n    undefined_name\ntime.sleep(60)"
    _, out, err, result = spmd_cell(shell, "-q", body)
    assert not result.success and "NameError" in out + err
    assert "out of step" not in out + err  # the other ranks were stopped in a sleep, in no collective
    _, out, err, result = spmd_cell(shell, "-o t_sum", "t = torch.ones(1)\ndist.all_reduce(t)\nt.item()")
    assert result.success, out + err
    assert "made again" not in out + err and shell.user_ns["t_sum"].values == [3.0, 3.0, 3.0]


@pytest.mark.skipif(not HAS_JAX, reason="jax is not installed (pip install 'jax[cpu]')")
def test_init_jax_runs_a_gloo_collective_between_the_cpu_ranks(shell: InteractiveShell) -> None:
    body = (
        "import os, jax, numpy as np\n"
        "from jax.experimental import multihost_utils\n"
        "gathered = multihost_utils.process_allgather(np.array([int(os.environ['RANK'])]))\n"
        "(jax.process_count(), gathered.ravel().tolist())"
    )
    _, out, err, result = spmd_cell(shell, "--init jax --timeout 1m", body)
    assert result.success, out + err
    assert result.result == (3, [0, 1, 2])
    assert "[Gloo]" not in out + err  # gloo's connection lines go to the kernel's log, not the cell


def test_stopping_the_cluster_ends_every_rank_process(loaded_shell: InteractiveShell) -> None:
    with inventory(NO_GPU), capture_output():
        loaded_shell.run_line_magic("gpucluster", "--replace --cpu-workers 2 --name spmd-stop")
    _, out, err, result = spmd_cell(loaded_shell, "-q", "x = 1")
    assert result.success, out + err
    owner = rank_sets.current().owner  # type: ignore[union-attr]
    found = rank_processes()
    pids = [by_owner[owner] for by_owner in found.values() if owner in by_owner]
    assert len(pids) == 2, found
    with capture_output():
        loaded_shell.run_line_magic("gpucluster", "stop")
    deadline = time.monotonic() + 15
    while any(psutil.pid_exists(pid) and psutil.Process(pid).status() != "zombie" for pid in pids):
        assert time.monotonic() < deadline, "rank processes outlived the cluster"
        time.sleep(0.2)
    with pytest.raises(UsageError, match="no cluster is running"):
        loaded_shell.run_cell_magic("gpurun", "spmd", "x")
    with inventory(NO_GPU), capture_output():
        loaded_shell.run_line_magic("gpucluster", "--cpu-workers 3 --name spmd")  # for the module's other tests


def test_no_stray_environment_in_the_kernel() -> None:
    assert "RANK" not in os.environ and "MASTER_PORT" not in os.environ


def test_an_adopted_cluster_gives_ranks_too(loaded_shell: InteractiveShell) -> None:
    """``--from`` a distributed ``LocalCluster`` made in the notebook: the same SPMD cell runs on its workers."""
    import logging

    from distributed import LocalCluster

    made = LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0", silence_logs=logging.ERROR
    )
    loaded_shell.user_ns["t_made"] = made
    try:
        with inventory(NO_GPU), capture_output():
            loaded_shell.run_line_magic("gpucluster", "--replace --from t_made --name spmd-from")
        value, out, err, result = spmd_cell(loaded_shell, "-q -o t_from", "import os\nint(os.environ['WORLD_SIZE'])")
        assert result.success, out + err
        assert value == 2 and len(loaded_shell.user_ns["t_from"].values) == 2
    finally:
        with capture_output():
            loaded_shell.run_line_magic("gpucluster", "stop")
        made.close()
        with inventory(NO_GPU), capture_output():
            loaded_shell.run_line_magic("gpucluster", "--cpu-workers 3 --name spmd")  # for the module's other tests
