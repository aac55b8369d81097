"""Interrupted SPMD cells on four real CPU ranks (``%gpucluster --cpu-workers 4``) from a real IPython shell: the
cell always ends in ``KeyboardInterrupt`` and the ranks keep their processes, whether a rank's library exits on
the interrupt (``SystemExit``, as Lightning's Trainer does), a library took SIGINT from the rank in an earlier cell,
the interrupt lands while the kernel draws the rows or takes an answer, or a ``SystemExit`` surfaces in the kernel
meanwhile; a value holding a rank's SIGINT handler comes back as its repr; and a gloo collective only rank 0
entered is named from torch's flight recorder at four ranks."""

from __future__ import annotations

import asyncio
import importlib.util
import re
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output

from gpu_magics.cluster.control import queries
from gpu_magics.spmd.kernel import cell_run
from gpu_magics.spmd.kernel import ranks as rank_sets
from gpu_magics.spmd.worker import host
from tests.display_recording import final_frames
from tests.interrupting import interrupt_when, marked, ranks_started, shows
from tests.test_gpurun import NO_GPU, inventory

pytestmark = pytest.mark.slow

HAS_TORCH = importlib.util.find_spec("torch") is not None
SLEEPS = "import time\ntime.sleep(60)\n"
STOPPED = "KeyboardInterrupt('every rank was stopped')"


@pytest.fixture(scope="module")
def shell(loaded_shell: InteractiveShell) -> Iterator[InteractiveShell]:
    with inventory(NO_GPU), capture_output():
        loaded_shell.run_line_magic("gpucluster", "--cpu-workers 4 --name spmd-interrupts")
    try:
        yield loaded_shell
    finally:
        with capture_output():
            loaded_shell.run_line_magic("gpucluster", "stop")


def rank_pids() -> list[int]:
    found: list[int] = []
    for owners in queries.require_client().run(host.rank_pids).values():
        found.extend(owners.values())
    return sorted(found)


def run(shell: InteractiveShell, body: str, line: str = "-q") -> Any:
    with capture_output():
        result = shell.run_cell(f"%%gpurun spmd {line}\n{body}")
    assert result.success, result.error_in_exec
    return result.result


def interrupted(
    shell: InteractiveShell,
    body: str,
    marks: Path,
    ctrl_c: bool = True,
    pressed: threading.Event | None = None,
    ready_ranks: int = 4,
) -> tuple[Any, str]:
    """Run ``body`` on every rank and press Ctrl-C once ``ready_ranks`` ranks have started it (``ctrl_c=False``:
    never; ``pressed`` is set once it was); the result and all it showed, each output as the cell left it."""
    with capture_output() as captured:
        ready = ranks_started(marks, ready_ranks) if ctrl_c else lambda: False
        with interrupt_when(ready, 120.0 if ctrl_c else 600.0, pressed):
            result = shell.run_cell(f"%%gpurun spmd\n{marked(body, marks)}")
    shown = "\n".join(final_frames(captured.outputs))
    return result, captured.stdout + captured.stderr + shown


def assert_stopped_in_place(shell: InteractiveShell, result: Any, text: str, before: list[int]) -> None:
    """The cell ended in the interrupt, every rank stopped (none failed, none ended), the same processes answer."""
    assert not result.success and repr(result.error_in_exec) == STOPPED, text
    assert all(f"rank {rank}: stopped" in text for rank in range(4)), text
    assert "SystemExit" not in text.split("KeyboardInterrupt", 1)[-1], text  # the lines under the interrupt
    assert rank_pids() == before
    assert run(shell, "import os\nint(os.environ['RANK'])") == 0  # the next cell runs on the same ranks


def test_a_rank_that_exits_on_the_interrupt_is_stopped_and_the_cell_ends_in_keyboard_interrupt(
    shell: InteractiveShell, tmp_path: Path
) -> None:
    run(shell, "kept = 1")
    before = rank_pids()
    # as Lightning's Trainer does on Ctrl-C
    body = "import sys, time\ntry:\n    time.sleep(60)\nexcept KeyboardInterrupt:\n    sys.exit(1)\n"
    result, text = interrupted(shell, body, tmp_path)
    assert_stopped_in_place(shell, result, text, before)


def test_a_rank_whose_sigint_a_library_took_in_an_earlier_cell_still_stops(
    shell: InteractiveShell, tmp_path: Path
) -> None:
    run(shell, "import signal\nprevious = signal.signal(signal.SIGINT, signal.SIG_IGN)  # as Lightning leaves it")
    before = rank_pids()
    result, text = interrupted(shell, SLEEPS, tmp_path)
    assert_stopped_in_place(shell, result, text, before)  # not ended after the grace period


@pytest.mark.parametrize("landing", [KeyboardInterrupt, SystemExit])
def test_an_interrupt_or_exit_landing_while_the_rows_are_drawn_stops_every_rank(
    shell: InteractiveShell, monkeypatch: pytest.MonkeyPatch, landing: type[BaseException], tmp_path: Path
) -> None:
    """Ctrl-C lands wherever the kernel's main thread is, drawing the rows included; a SystemExit that surfaces
    there (a signal handler's, a library's) ends the cell the same way."""
    run(shell, "kept = 1")  # the ranks running (where this test runs first in its process)
    before = rank_pids()
    draw = cell_run.CellRun.view
    started = ranks_started(tmp_path, 4)
    landed: list[int] = []

    def view(self: Any, finished: bool = False) -> Any:
        if not landed and started():  # some rows in, every rank running the cell
            landed.append(1)
            raise landing()
        return draw(self, finished)

    monkeypatch.setattr(cell_run.CellRun, "view", view)
    result, text = interrupted(shell, SLEEPS, tmp_path, ctrl_c=False)  # no Ctrl-C of the test's own
    monkeypatch.undo()
    assert_stopped_in_place(shell, result, text, before)


def test_a_systemexit_answer_taken_after_the_interrupt_ends_the_cell_in_keyboard_interrupt(
    shell: InteractiveShell, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A rank's call failing with a BaseException on the client's loop (SystemExit, CancelledError) is that rank's
    answer: it never surfaces in the kernel as the cell's error."""
    ask = rank_sets.Ranks._ask
    pressed = threading.Event()

    async def failing(self: Any, address: str, message: Any) -> Any:
        if message.get("op") == "run" and address == max(self.world.addresses):
            while not pressed.is_set():  # the answer comes once Ctrl-C was pressed
                await asyncio.sleep(0.05)
            raise SystemExit
        return await ask(self, address, message)

    monkeypatch.setattr(rank_sets.Ranks, "_ask", failing)
    # the failing rank never starts the cell: Ctrl-C once the other three have
    result, text = interrupted(shell, SLEEPS, tmp_path, pressed=pressed, ready_ranks=3)
    monkeypatch.undo()
    assert not result.success and repr(result.error_in_exec) == STOPPED, text


@pytest.mark.skipif(not HAS_TORCH, reason="torch is not installed (pip install torch)")
def test_a_gloo_collective_only_rank_0_entered_is_named_from_the_flight_recorder_at_four_ranks(
    shell: InteractiveShell,
) -> None:
    run(shell, "import torch, torch.distributed as dist", line="--reset --init torch -q")
    body = (
        "t = torch.ones(1)\n"
        "if dist.get_rank() == 0:\n"
        "    work = dist.all_reduce(t, async_op=True)\n"
        "    work.wait()   # in C++: the stack names no collective, the flight recorder does\n"
    )
    named = r"all_reduce #\d+ \(gloo\) waits for ranks 1-3, which never entered it \(cell line 4\)"
    shell.run_line_magic("config", "GpuMagics.spmd_stall_s = 1.0")
    try:
        with capture_output() as captured, interrupt_when(shows(captured, named)):  # Ctrl-C once it is named
            result = shell.run_cell(f"%%gpurun spmd\n{body}")
    finally:
        shell.run_line_magic("config", "GpuMagics.spmd_stall_s = 30.0")
    text = (
        captured.stdout + captured.stderr + "\n".join(output.data.get("text/plain", "") for output in captured.outputs)
    )
    assert re.search(named, text), text
    assert not result.success and isinstance(result.error_in_exec, KeyboardInterrupt)


def test_a_cells_value_holding_the_ranks_sigint_handler_comes_back_as_its_repr(shell: InteractiveShell) -> None:
    """``signal.signal`` returns the REPL's handler; the REPL's connections must not travel to the kernel (their
    file descriptors, closed here when collected, would be the kernel's own)."""
    value = run(shell, "import signal\nsignal.getsignal(signal.SIGINT)")
    assert type(value).__name__ == "RankValue" and "on_interrupt" in repr(value)
    assert run(shell, "import os\nint(os.environ['RANK'])") == 0
