"""Stuck and broken NCCL collectives on two real GPUs: a collective only rank 0 entered is named in its status row
(torch's flight recorder gives its number), the rank is shown waiting for its GPU work rather than done, and
after the interrupt the group is made again in the same processes with the variables kept; a rank that raises
while the other waits in an all_reduce (a wait no interrupt reaches) gets its group aborted, so that rank answers
and keeps its process. Skipped without two GPUs or torch."""

from __future__ import annotations

import contextlib
import importlib.util
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output

from gpu_magics.cluster.control import queries
from gpu_magics.spmd.worker import host
from tests.gpu.test_spmd_gpu import COLLECTIVE_TIMEOUT, run, started
from tests.interrupting import interrupt_when, shows

pytestmark = [
    pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="needs torch in the workers' environment"),
    pytest.mark.timeout(300),
]

# NCCL connects its ranks at the first collective, the host waiting for every rank: one all_reduce by all first,
# so that the collective under test returns at once on the host and only the GPU waits, as in a training loop.
WARM = "import torch, torch.distributed as dist\nt_kept = 7\ndist.all_reduce(torch.ones(1, device='cuda'))"
REMADE = "the process group is made again in the same processes, now (--init torch): variables are kept"


@pytest.fixture(scope="module")
def shell(loaded_shell: InteractiveShell) -> InteractiveShell:
    return loaded_shell


@pytest.fixture(scope="module")
def gpu_count() -> int:
    import cupy

    return int(cupy.cuda.runtime.getDeviceCount())


def check_remade_in_place(shell: InteractiveShell) -> None:
    """The next cell makes the group again in the same processes: the variables are there, NCCL all-reduces."""
    value, shown = run(
        shell, "%%gpurun spmd -q\nt = torch.ones(4, device='cuda')\ndist.all_reduce(t)\n(t.tolist(), t_kept)"
    )
    assert REMADE in shown and value == ([2.0] * 4, 7)


def rank_pids() -> list[int]:
    found: list[int] = []
    for owners in queries.require_client().run(host.rank_pids).values():
        found.extend(owners.values())
    return sorted(found)


@contextlib.contextmanager
def two_warm_ranks(shell: InteractiveShell, gpu_count: int) -> Iterator[list[int]]:
    """Two NCCL ranks on GPUs 0 and 1, their group made and connected (``WARM``); their process ids."""
    if gpu_count < 2:
        pytest.skip("needs 2 GPUs")
    with started(shell, "--gpus 0,1"):
        run(shell, f"%%gpurun spmd --init torch --timeout {COLLECTIVE_TIMEOUT} -q\n{WARM}")
        yield rank_pids()


def interrupted_cell(shell: InteractiveShell, code: str, named: str) -> tuple[Any, list[str], str]:
    """Run a cell and press Ctrl-C once a status table shows ``named`` (the stalled collective named, as a user
    presses stop on reading it); the result, the status tables shown, the text."""
    with capture_output() as captured, interrupt_when(shows(captured, named)):
        result = shell.run_cell(code)
    tables = [output.data.get("text/plain", "") for output in captured.outputs]
    return result, tables, captured.stdout + captured.stderr


def test_an_nccl_collective_only_rank_0_entered_is_named_and_the_group_made_again_in_place(
    shell: InteractiveShell, gpu_count: int
) -> None:
    with two_warm_ranks(shell, gpu_count) as before:
        body = (
            "import torch, torch.distributed as dist\n"
            "t = torch.ones(4, device='cuda')\n"
            "if dist.get_rank() == 0:\n"
            "    dist.all_reduce(t)   # returns at once: the GPU waits for rank 1\n"
        )
        named = (
            r"(all_reduce #\d+ \(NCCL\) waits for rank 1, which never entered it \(waiting for the GPU after the cell\)"
            r"|collective #\d+ \(NCCL\) waits for rank 1, which never entered it \(waiting for the GPU after the "
            r"cell; which collective is not known: [^)]+\))"
        )  # NCCL's flight recorder names it; a torch without one says why not
        shell.run_line_magic("config", "GpuMagics.spmd_stall_s = 2.0")
        try:
            result, tables, text = interrupted_cell(shell, f"%%gpurun spmd\n{body}", named)
        finally:
            shell.run_line_magic("config", "GpuMagics.spmd_stall_s = 30.0")
        assert any(re.search(named, table) for table in tables), tables
        rank_0_rows = [line for table in tables for line in table.splitlines() if line.strip().startswith("rank 0 ")]
        assert rank_0_rows and not any(" done" in row for row in rank_0_rows), rank_0_rows  # waiting, never "done"
        assert not result.success and isinstance(result.error_in_exec, KeyboardInterrupt)
        assert "the next SPMD cell makes it again in the same processes, variables kept" in text, text
        assert rank_pids() == before
        check_remade_in_place(shell)
        assert rank_pids() == before


def test_a_rank_that_raises_while_the_other_waits_in_an_nccl_all_reduce_keeps_both_processes(
    shell: InteractiveShell, gpu_count: int, tmp_path: Path
) -> None:
    with two_warm_ranks(shell, gpu_count) as before:
        body = (  # rank 1 raises once rank 0 is on its way into the collective (else no collective was cut short)
            f"import pathlib, time, torch, torch.distributed as dist\nmark = pathlib.Path({str(tmp_path / 'in')!r})\n"
            "if dist.get_rank() == 1:\n"
            "    while not mark.exists():\n"
            "        time.sleep(0.05)\n"
            "    time.sleep(0.5)\n"
            "    raise ValueError('boom on rank 1')\n"
            "mark.touch()\n"
            "t = torch.ones(4, device='cuda')\n"
            "dist.all_reduce(t)\n"
            "t.sum().item()   # waits in CUDA for the all_reduce: no interrupt reaches it, the group's abort does\n"
        )
        with capture_output() as captured:
            result = shell.run_cell(f"%%gpurun spmd -q\n{body}")
        text = captured.stdout + captured.stderr
        assert not result.success and type(result.error_in_exec).__name__ == "ValueError", text
        assert "the next SPMD cell makes it again in the same processes, variables kept" in text, text
        assert rank_pids() == before  # rank 0 answered once its group was aborted: not ended
        check_remade_in_place(shell)


def test_an_nccl_collective_only_rank_0_entered_is_named_at_every_gpus_rank_and_the_cell_ends_interrupted(
    shell: InteractiveShell, gpu_count: int
) -> None:
    """One rank per GPU of the machine (4 on a 4-GPU host): the row names the collective and every rank that never
    entered it, and the interrupted cell ends in KeyboardInterrupt (once it ended in SystemExit on 4 H200s)."""
    if gpu_count < 3:
        pytest.skip("needs 3 GPUs or more (two: the test above)")
    with started(shell, f"--gpus {','.join(map(str, range(gpu_count)))}"):
        run(shell, f"%%gpurun spmd --init torch --timeout {COLLECTIVE_TIMEOUT} -q\n{WARM}")
        before = rank_pids()
        body = (
            "import torch, torch.distributed as dist\n"
            "t = torch.ones(4, device='cuda')\n"
            "if dist.get_rank() == 0:\n"
            "    dist.all_reduce(t)   # returns at once: the GPU waits for the other ranks\n"
        )
        others = f"1-{gpu_count - 1}" if gpu_count > 3 else "1,2"
        named = rf"all_reduce #\d+ \(NCCL\) waits for ranks {others}, which never entered it"
        unnamed = rf"collective #\d+ \(NCCL\) waits for ranks {others}, which never entered it \(.*which collective is"
        shell.run_line_magic("config", "GpuMagics.spmd_stall_s = 2.0")
        try:
            result, tables, text = interrupted_cell(shell, f"%%gpurun spmd\n{body}", f"{named}|{unnamed}")
        finally:
            shell.run_line_magic("config", "GpuMagics.spmd_stall_s = 30.0")
        assert any(re.search(named, table) or re.search(unnamed, table) for table in tables), tables
        assert not result.success and isinstance(result.error_in_exec, KeyboardInterrupt), (result.error_in_exec, text)
        assert rank_pids() == before
        value, shown = run(
            shell, "%%gpurun spmd -q\nt = torch.ones(4, device='cuda')\ndist.all_reduce(t)\n(t.tolist(), t_kept)"
        )
        assert REMADE in shown and value == ([float(gpu_count)] * 4, 7)
