"""A rank process that ends by itself never breaks the next SPMD cell, through a real kernel as JupyterLab drives
it (jupyter_client) with a real 2-worker CPU cluster: after ``os._exit`` in a cell and after a ``SIGKILL`` from
outside, the next cell starts a new world (every rank new), says so in one line, and makes the process group
again as the last world had it. And the ranks' output, as a reader expects it: lines in the order they were
printed across ranks, shown while the cell runs."""

from __future__ import annotations

import importlib.util
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.test_kernel_faults import Kernel, loaded_kernel
from tests.test_spmd_kernel import rank_pids

pytestmark = pytest.mark.slow

HAS_TORCH = importlib.util.find_spec("torch") is not None
needs_torch = pytest.mark.skipif(not HAS_TORCH, reason="torch is not installed (pip install torch)")

STATE = (
    "%%gpurun spmd -q\nimport os, torch.distributed as dist\nprint('state', 'kept' in globals(), dist.is_initialized())"
)


@pytest.fixture
def kernel(tmp_path: Path) -> Iterator[Kernel]:
    with loaded_kernel(tmp_path) as started:
        started.ok("%gpucluster --cpu-workers 2 --name spmd-recovery", timeout=120)
        yield started


def new_world_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if "every rank starts anew" in line]


@needs_torch
def test_a_rank_that_exits_in_a_cell_gives_a_new_world_with_its_group_at_the_next_cell(kernel: Kernel) -> None:
    kernel.ok("%%gpurun spmd --init torch -q\nkept = 1", timeout=120)
    before = rank_pids(kernel)
    reply, text = kernel.run(
        "%%gpurun spmd\nimport os\nif os.environ['RANK'] == '1':\n    os._exit(3)\nprint('alive')", timeout=60
    )
    assert reply["status"] == "error" and reply["ename"] == "RankProcessEnded", text
    assert "RankProcessEnded: the rank process ended (exit code 3)" in text and "exit code None" not in text
    assert "↳ its process ended" not in text  # the row says its reason once, in its state
    text = kernel.ok(STATE, timeout=120)
    said = new_world_lines(text)
    assert said == [
        "%%gpurun spmd: rank 1's process ended in the last cell (exit code 3): every rank starts anew (its variables "
        "are gone); the process group is made again as before, now (--init torch)"
    ], text
    assert "[0,1] state False True" in text  # variables gone, the group made again
    after = rank_pids(kernel)
    assert len(after) == 2 and not set(after) & set(before)  # every rank is new
    assert new_world_lines(kernel.ok(STATE)) == []  # said once


@needs_torch
def test_a_rank_killed_between_cells_gives_a_new_world_at_the_next_cell(kernel: Kernel) -> None:
    kernel.ok("%%gpurun spmd --init torch -q\nkept = 1", timeout=120)
    before = rank_pids(kernel)
    kernel.ok(f"import os, signal\nos.kill({before[1]}, signal.SIGKILL)")  # from outside, as the OOM killer does
    text = kernel.ok(STATE, timeout=120)  # at once: the cell may reach the dead rank before the news of its end
    said = new_world_lines(text)
    assert len(said) == 1 and "'s process ended (SIGKILL): every rank starts anew" in said[0], text
    assert said[0].endswith("the process group is made again as before, now (--init torch)")
    assert "[0,1] state False True" in text
    assert not set(rank_pids(kernel)) & set(before)


@needs_torch
def test_a_rank_that_raises_while_another_waits_in_a_collective_keeps_every_process_and_variable(
    kernel: Kernel, tmp_path: Path
) -> None:
    kernel.ok("%%gpurun spmd --init torch -q\nkept = 1", timeout=120)
    before = rank_pids(kernel)
    began = time.monotonic()
    cell = (  # rank 1 raises once rank 0 is on its way into the collective (if rank 0 is not in it yet, it is
        # stopped before it, and the group is made again all the same: the outcome does not hang on the 0.5 s)
        "%%gpurun spmd -q\nimport os, pathlib, time, torch, torch.distributed as dist\n"
        f"mark = pathlib.Path({str(tmp_path / 'in')!r})\n"
        "if os.environ['RANK'] == '1':\n    while not mark.exists():\n        time.sleep(0.05)\n    time.sleep(0.5)\n"
        "    raise ValueError('boom on rank 1')\n"
        "mark.touch()\nt = torch.ones(1)\ndist.all_reduce(t)   # rank 1 never comes"
    )
    reply, text = kernel.run(cell, timeout=200)
    took = time.monotonic() - began
    assert reply["status"] == "error" and reply["ename"] == "ValueError", text
    # not held until a timeout (the collective's own is 30 min, the cell's 5 min): a bound far from both, which a
    # busy machine does not reach
    assert took < 150, f"the failing cell took {took:.1f} s"
    assert "the next SPMD cell makes it again in the same processes, variables kept" in text, text
    assert same_processes(rank_pids(kernel), before)  # rank 0 answered once the group was aborted: not ended
    text = kernel.ok("%%gpurun spmd -q\nt = torch.ones(1)\ndist.all_reduce(t)\nprint('sum', t.item(), 'kept' in dir())")
    assert (
        "%%gpurun spmd: the process group is made again in the same processes, now (--init torch): variables are "
        "kept; make again what holds the old group, such as a DDP model"
    ) in text, text
    assert "[0,1] sum 2.0 True" in text and new_world_lines(text) == []


NEWS_OF_AN_END = (  # waits (at most 120 s) until the kernel has heard that a rank's process ended by itself
    "import time\nfrom gpu_magics.spmd.kernel import ranks\ndeadline = time.monotonic() + 120\n"
    "while not ranks.current()._lost:\n    assert time.monotonic() < deadline, 'no news of the end'\n"
    "    time.sleep(0.05)"
)


def same_processes(now: list[int], before: list[int]) -> bool:
    return sorted(now) == sorted(before)


def test_a_rank_killed_without_a_group_and_reset_still_works(kernel: Kernel) -> None:
    kernel.ok("%%gpurun spmd -q\nkept = 1", timeout=60)
    before = rank_pids(kernel)
    kernel.ok(f"import os, signal\nos.kill({before[0]}, signal.SIGKILL)")
    kernel.ok(NEWS_OF_AN_END)  # this time the news of its end (the worker's event) reaches the kernel before the cell
    text = kernel.ok("%%gpurun spmd -q\nprint('fresh', 'kept' in globals())", timeout=60)
    said = new_world_lines(text)
    assert len(said) == 1 and "(SIGKILL): every rank starts anew (its variables are gone)" in said[0], text
    assert "process group" not in said[0]  # there was none to make again
    assert "[0,1] fresh False" in text
    text = kernel.ok("%gpurun spmd --reset")
    assert "the ranks were ended" in text
    text = kernel.ok("%%gpurun spmd -q\nprint('after reset')", timeout=60)
    assert "[0,1] after reset" in text and new_world_lines(text) == []


LOCKSTEP = """%%gpurun spmd -q
import os, pathlib, time
rank = int(os.environ["RANK"])
gate = pathlib.Path(GATE)
for step in range(4):
    if rank == 0:
        print(f"step {step}")
    if step == 0:  # every rank waits until the notebook has shown "step 0" (at most 120 s, then says so)
        began = time.monotonic()
        while not gate.exists():
            if time.monotonic() - began > 120:
                print("step 0 was not shown while the cell ran")
                break
            time.sleep(0.05)
    time.sleep(0.5)
print("done")
"""


def test_lines_show_live_and_in_the_order_printed_across_ranks(kernel: Kernel, tmp_path: Path) -> None:
    kernel.ok("%%gpurun spmd -q\npass", timeout=60)
    gate = tmp_path / "step-0-shown"
    msg_id = kernel.start(LOCKSTEP.replace("GATE", repr(str(gate))))
    text = ""  # a busy kernel may send a line and its newline in two stream messages: joined, then split
    deadline = time.monotonic() + 240
    while True:
        message = kernel.client.get_iopub_msg(timeout=max(0.1, deadline - time.monotonic()))
        if message["parent_header"].get("msg_id") != msg_id:
            continue
        if message["msg_type"] == "stream":
            text += message["content"]["text"]
            if "[0] step 0\n" in text:
                gate.touch()  # the ranks go on only now: "step 0" showed while the cell ran
        if message["msg_type"] == "status" and message["content"]["execution_state"] == "idle":
            break
    lines = text.splitlines()
    assert lines == ["[0] step 0", "[0] step 1", "[0] step 2", "[0] step 3", "[0,1] done"], lines


@needs_torch
def test_a_worker_that_died_and_came_back_gives_a_new_world_with_its_group(kernel: Kernel) -> None:
    kernel.ok("%%gpurun spmd --init torch -q\nkept = 1", timeout=120)
    workers = kernel.worker_pids()
    kernel.ok(  # SIGKILL one worker (its rank goes with it); its nanny starts a new one at a new address
        "import os, signal, time, gpu_magics\nclient = gpu_magics.client()\n"
        "before = set(client.scheduler_info()['workers'])\n"
        f"os.kill({workers[1]}, signal.SIGKILL)\ndeadline = time.monotonic() + 60\n"
        "while True:\n"
        "    now = set(client.scheduler_info()['workers'])\n"
        "    if len(now) == 2 and now != before:\n        break\n"
        "    assert time.monotonic() < deadline, 'the worker did not come back'\n    time.sleep(0.5)",
        timeout=90,
    )
    text = kernel.ok(STATE, timeout=120)
    said = new_world_lines(text)
    assert len(said) == 1 and "the cluster's workers changed" in said[0], text
    assert said[0].endswith("the process group is made again as before, now (--init torch)")
    assert "[0,1] state False True" in text
