"""One SPMD cell: hand it to every chosen rank at once, show their output and status rows while they run, and end
it cleanly whatever happens.

- A rank that raises stops every other rank (an interrupt; a rank that does not stop within a few seconds, such
  as one waiting in a collective that will never complete, has its process ended), and the cell fails with the
  first failing rank's traceback (its own frames, library frames folded) and one line for each other rank; a
  package the ranks lack is one line with its pip command.
- A rank process that ended (by itself, or ended here) makes the next cell start every rank anew and make the
  groups the last world had; a rank found dead as the cell reaches it does the same at once (the cell runs once).
- One status table per cell (the group made for it is a line in it); lines show in the order the ranks printed
  them, progress bars as one live line per rank.
- Ctrl-C stops every rank the same way; the cell reports ``KeyboardInterrupt``.
- A rank that prints nothing for ``stall_s`` seconds is named in its status row, with where it waits.
- Rank 0's last expression (the first chosen rank's, under ``--ranks``) is the cell's result.
"""

from __future__ import annotations

import ast
import concurrent.futures
import contextlib
import queue
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from IPython.core.error import UsageError

from gpu_magics.display.format import format_seconds
from gpu_magics.spmd.kernel import ranks as rank_sets
from gpu_magics.spmd.kernel.output import LineMerger, rank_list
from gpu_magics.spmd.kernel.results import (
    DONE,
    ENDED,
    FAILED,
    RUNNING,
    STOPPED,
    FoldedLines,
    RankOutcome,
    SpmdResult,
    StatusView,
    exit_words,
    load_value,
)
from gpu_magics.spmd.kernel.shown import Bars, Board, display, log_noise, missing_line, missing_module, print_lines
from gpu_magics.spmd.kernel.world import PROG, Rank, World, check_group

if TYPE_CHECKING:
    from IPython.core.interactiveshell import InteractiveShell

    from gpu_magics.gpurun.options import RunOptions

STALL_S = 30.0  # seconds without output before a running rank's row says where it waits
REFRESH_S = 0.5  # seconds between two updates of the status rows
STOP_WAIT_S = 12.0  # how long the kernel waits for stopped ranks to answer (they are ended after 3 s)


class RankFailure(Exception):
    """A rank's error, shown in the kernel as the rank's own traceback."""


@dataclass(frozen=True)
class CellSettings:
    quiet: bool = False
    stall_s: float = STALL_S
    timeout_s: float = 300.0


def check_source(code: str) -> None:
    """A cell that does not parse is one line here, before any rank starts."""
    try:
        ast.parse(code)
    except SyntaxError as error:
        raise UsageError(f"{PROG}: the cell does not parse (line {error.lineno}: {error.msg}); nothing ran") from None


def run(shell: InteractiveShell, options: RunOptions, code: str, settings: CellSettings) -> Any:
    """Run ``code`` as an SPMD cell; its result (rank 0's value), with ``-o`` the ``SpmdResult`` kept."""
    from gpu_magics.cluster import queries

    check_source(code)
    client = queries.require_client()
    made = rank_sets.for_client(client)
    if options.reset:
        made.end()
        if not code.strip():
            print(f"{PROG}: the ranks were ended; the next SPMD cell starts new ones")
            return None
    if not code.strip() and not options.init and not made.regroup:
        return None
    board = Board(settings.quiet, options.show_ranks)
    try:
        return _run_world(shell, made, options, code, settings, board)
    except _WorldLost as lost:  # a rank had ended before the cell reached it: a new world, once
        made.lose(lost.rank, lost.how)
        board.notes.clear()
    try:
        return _run_world(shell, made, options, code, settings, board)
    except _WorldLost as lost:
        made.lose(lost.rank, lost.how)
        raise UsageError(
            f"{PROG}: rank {lost.rank}'s new process ended too before the cell reached it ({lost.how}); nothing ran "
            "(see the workers' logs; %gpucluster restart gives new workers)"
        ) from None


class _WorldLost(Exception):
    def __init__(self, rank: int, how: str) -> None:
        super().__init__(rank, how)
        self.rank, self.how = rank, how


def _run_world(
    shell: InteractiveShell,
    made: rank_sets.Ranks,
    options: RunOptions,
    code: str,
    settings: CellSettings,
    board: Board,
) -> Any:
    """The cell on the world of now: the groups it needs first (those the last world had, ``--init``), then the
    code."""
    world, notes = made.prepare_for_cell()
    for note in notes:
        print(note)
    chosen = world.select(options.ranks, f"{PROG} --ranks")
    if options.show_ranks is not None:
        world.select(options.show_ranks, f"{PROG} --output")
    timeout_s = settings.timeout_s if options.timeout_min is None else options.timeout_min * 60
    kinds = list(made.regroup)
    if options.init and options.init not in made.groups and options.init not in kinds:
        kinds.append(options.init)
    for kind in kinds:
        check_group(world, kind, world.ranks)
        made.cells += 1
        init = _CellRun(shell, made, world, world.ranks, settings, board)
        result = init.run({"op": "init", "kind": kind, "timeout": timeout_s}, f"<rank init {made.cells}>")
        if result is None:
            return None
        made.group_made(kind)
        board.notes.append(f"{result.outcomes[0].value} (made in {format_seconds(result.wall)})")
    if not code.strip():
        if kinds and not settings.quiet:
            board.show(init.view(finished=True))
        return None
    made.cells += 1
    name = f"<rank cell {made.cells}>"
    result = _CellRun(shell, made, world, chosen, settings, board).run({"op": "run", "code": code, "name": name}, name)
    if result is None:
        return None
    if options.output:
        shell.user_ns[options.output] = result
    return result.outcomes[0].value


class _CellRun:
    """The ranks running one message (a cell, or a group's init), watched from the kernel's main thread."""

    def __init__(
        self,
        shell: InteractiveShell,
        made: rank_sets.Ranks,
        world: World,
        chosen: tuple[Rank, ...],
        settings: CellSettings,
        board: Board,
    ) -> None:
        self.shell, self.made, self.world, self.chosen, self.settings = shell, made, world, chosen, settings
        self.board = board
        self.events: queue.Queue[tuple[str, int, Any]] = queue.Queue()
        self.merger = LineMerger([rank.rank for rank in chosen], shown=board.shown)
        self.bars = Bars(board.shown)
        self.outcomes = {rank.rank: RankOutcome(rank.rank, rank.label) for rank in chosen}
        self.by_rank = {rank.rank: rank for rank in chosen}
        self.first_failure: int | None = None
        self.lost_before: tuple[int, str] | None = None  # a rank that had ended before this message reached it
        self.died: dict[int, str] = {}  # rank -> how its process ended by itself during the message
        self.stopping = False
        self.began = 0.0
        self.last_output: dict[int, float] = {}
        self.asked_where: dict[int, float] = {}

    def run(self, message: dict[str, Any], cell: str) -> SpmdResult | None:
        """Run ``message`` on the chosen ranks; the result, or ``None`` when the cell failed (shown already)."""
        self.began = time.perf_counter()
        self.cell = cell
        self.made.listen(self._on_lines)
        pending: dict[int, concurrent.futures.Future[Any]] = {}
        for rank in self.chosen:
            future = self.made.ask(rank, {**message, "cell": cell})
            future.add_done_callback(self._on_done(rank.rank, "done"))
            pending[rank.rank] = future
        self.board.show(self.view())
        interrupted = False
        try:
            interrupted = self._watch(pending)
        finally:
            self.made.listen(None)
        if self.lost_before is not None:
            for future in pending.values():
                future.cancel()
            raise _WorldLost(*self.lost_before)
        self.bars.end()
        print_lines(self.merger.flush())
        if self.merger.folded:  # --output: the other ranks' lines, in a block that a click opens
            display(FoldedLines(self.merger.folded))
        log_noise(self.merger.noise)
        wall = time.perf_counter() - self.began
        self.board.show(self.view(finished=True))
        ended = [index for index, outcome in self.outcomes.items() if outcome.state == ENDED]
        self.made.forget_ended(ended, self.died)
        result = SpmdResult(self.world.describe(), [self.outcomes[rank.rank] for rank in self.chosen], wall)
        if interrupted or self.first_failure is not None:
            self._fail(interrupted, ended)
            return None
        return result

    def _on_lines(self, rank: int, cell: Any, lines: list[Any], progress: dict[str, str]) -> None:
        """Live output from the workers' events: this cell's only (a late event of the cell before is dropped)."""
        if cell == self.cell:
            self.events.put(("lines", rank, lines))
            if progress:
                self.events.put(("progress", rank, progress))

    def _watch(self, pending: dict[int, concurrent.futures.Future[Any]]) -> bool:
        """Take events until every rank answered; whether the user interrupted."""
        interrupted = False
        deadline: float | None = None
        refreshed = time.perf_counter()
        while pending:
            try:
                kind, index, payload = self.events.get(timeout=0.1)
            except queue.Empty:
                kind = ""
            except KeyboardInterrupt:
                if not interrupted:
                    interrupted = True
                    self._stop_all(pending)
                    deadline = time.perf_counter() + STOP_WAIT_S
                continue
            now = time.perf_counter()
            if kind == "lines":
                self.merger.add(index, payload, now)
                self.last_output[index] = now
            elif kind == "progress":
                self.bars.update(index, payload)
                self.last_output[index] = now
            elif kind == "done":
                pending.pop(index, None)
                self._finished(index, payload)
                if self.lost_before is not None:
                    return interrupted
                if self.outcomes[index].state == FAILED and not self.stopping:
                    self.first_failure = index
                    self._stop_all(pending)
            elif kind == "where":
                outcome = self.outcomes[index]
                if outcome.state == RUNNING:
                    quiet = now - self.last_output.get(index, self.began)
                    outcome.note = f"no output for {quiet:.0f} s · {payload}"
            print_lines(self.merger.ready(now))
            self.bars.show(now)
            if now - refreshed >= REFRESH_S:
                refreshed = now
                self._check_stalls(now)
                self.board.show(self.view())
            if deadline is not None and now > deadline:
                for index in list(pending):
                    pending.pop(index).cancel()
                    self.outcomes[index].state = ENDED
                    self.outcomes[index].note = "did not answer after the stop"
        return interrupted

    def _finished(self, index: int, future: concurrent.futures.Future[Any]) -> None:
        outcome = self.outcomes[index]
        outcome.seconds = time.perf_counter() - self.began
        try:
            reply = next(iter(future.result().values()))
        except Exception as error:  # the rank's failure, of any kind, is its outcome
            reply = error
        if isinstance(reply, BaseException):
            outcome.state, outcome.error = (
                FAILED,
                {
                    "type": type(reply).__name__,
                    "message": f"its worker did not answer ({reply})",
                    "traceback": "",
                },
            )
            if not self.stopping:  # its worker died or left: the next cell starts a new world, groups and all
                self.died[index] = f"its worker did not answer: {type(reply).__name__}"
            return
        self.merger.add(index, reply.get("lines", ()), time.perf_counter())
        self.merger.finished(index)
        outcome.seconds = reply.get("seconds", outcome.seconds)
        outcome.peak_memory = reply.get("peak_memory")
        outcome.note = ""
        if reply.get("ended"):
            how = exit_words(reply.get("exit_code"), bool(reply.get("oom")))
            if reply.get("before") and not self.stopping:
                self.lost_before = (index, how)
                return
            outcome.state = ENDED
            outcome.note = "its process was ended" if self.stopping else "its process ended"
            if not self.stopping:
                self.died[index] = how
                outcome.state = FAILED
                outcome.error = {
                    "type": "RankProcessEnded",
                    "message": f"the rank process ended ({how})",
                    "traceback": "",
                }
            return
        said = reply.get("error")
        if said is None:
            outcome.state = DONE
            outcome.value = load_value(index, reply.get("value"), reply.get("repr"))
        elif said.get("interrupted"):
            outcome.state, outcome.error = STOPPED, said
        else:
            outcome.state, outcome.error = FAILED, said

    def _stop_all(self, pending: dict[int, concurrent.futures.Future[Any]]) -> None:
        self.stopping = True
        if pending:
            self.made.stop([self.by_rank[index] for index in pending])

    def _check_stalls(self, now: float) -> None:
        for index, outcome in self.outcomes.items():
            if outcome.state != RUNNING:
                continue
            quiet = now - self.last_output.get(index, self.began)
            if quiet >= self.settings.stall_s and now - self.asked_where.get(index, 0.0) >= self.settings.stall_s:
                self.asked_where[index] = now
                future = self.made.where(self.by_rank[index])
                future.add_done_callback(self._on_done(index, "where"))

    def _on_done(self, index: int, kind: str) -> Callable[[concurrent.futures.Future[Any]], None]:
        def put(done: concurrent.futures.Future[Any]) -> None:
            self.events.put((kind, index, done if kind == "done" else _answer(done)))

        return put

    def view(self, finished: bool = False) -> StatusView:
        self._add_telemetry()
        outcomes = [self.outcomes[rank.rank] for rank in self.chosen]
        gpus = any(rank.gpu for rank in self.chosen)
        wall = time.perf_counter() - self.board.began
        return StatusView(self.world.describe(), outcomes, wall, finished, gpus, list(self.board.notes))

    def _add_telemetry(self) -> None:
        from gpu_magics.cluster import queries

        found = queries.telemetry()
        if found is None or self.world.kind == "cpu":
            return
        with contextlib.suppress(Exception):  # the GPU figures are a courtesy: any failure leaves them out
            reported = {gpu.gpu.uuid: gpu.gpu for member in found.members() for gpu in member.gpus}
            for rank in self.chosen:
                gpu = reported.get(rank.member.gpu_uuid or "")
                if gpu is None:
                    continue
                outcome = self.outcomes[rank.rank]
                outcome.gpu_util, outcome.gpu_memory = gpu.gpu_util, gpu.memory_used
                outcome.gpu_memory_total = gpu.memory_total
                pid = self.made.pids.get(rank.rank)  # NVML's figure for the rank's own process, where it sees it
                held = [used for found_pid, used in gpu.gpu_processes or () if found_pid == pid and used is not None]
                if held:
                    outcome.rank_memory = held[0]

    def _fail(self, interrupted: bool, ended: list[int]) -> None:
        """The cell fails: the first failing rank's traceback (or the interrupt) and one line per other rank."""
        from gpu_magics.gpurun.execute import mark_failed

        lines: list[str] = []
        said: set[int] = set()  # ranks whose failure is said already
        if self.first_failure is not None and not interrupted:
            first = self.outcomes[self.first_failure]
            error = first.error or {}
            missing = missing_module(error)
            if missing is not None:  # not a bug in the cell: a package the ranks lack, one line
                said = {o.rank for o in self.outcomes.values() if o.error and missing_module(o.error) == missing}
                where = f"rank{'s' * (len(said) > 1)} {rank_list(said)}"
                lines.append(missing_line(missing, where))
                name, message = "ModuleNotFoundError", f"no module named {missing!r} where {where} run"
            else:
                said = {first.rank}
                lines.append(f"rank {first.rank} ({first.label}) failed first:")
                lines.append(str(error.get("traceback") or f"{error.get('type')}: {error.get('message')}").rstrip())
                name, message = str(error.get("type", "RankFailure")), f"rank {first.rank}: {error.get('message')}"
        else:
            name, message = "KeyboardInterrupt", "every rank was stopped"
        for index, outcome in self.outcomes.items():
            if index in said and not interrupted:
                continue
            lines.append(f"rank {index}: {_other_line(outcome)}")
        if ended or self.died:
            lines.append(_ended_line(ended, self.died))
        error_type = KeyboardInterrupt if name == "KeyboardInterrupt" else type(name, (RankFailure,), {})
        error = error_type(message)
        self.shell._showtraceback(error_type, error, lines)
        mark_failed(self.shell, error)


def _ended_line(ended: list[int], died: dict[int, str]) -> str:
    """``rank 2 did not stop within 3 s and was ended: the next SPMD cell starts new ranks ...``."""
    parts = []
    if ended:
        many = len(ended) > 1
        parts.append(
            f"rank{'s' * many} {', '.join(map(str, ended))} did not stop within {rank_sets.STOP_GRACE_S:.0f} s "
            f"and {'were' if many else 'was'} ended"
        )
    if died:
        many = len(died) > 1
        parts.append(f"the process{'es' * many} of rank{'s' * many} {', '.join(map(str, sorted(died)))} ended")
    return (
        " and ".join(parts) + ": the next SPMD cell starts new ranks (variables start empty; a process group is made "
        "again as before)"
    )


def _other_line(outcome: RankOutcome) -> str:
    if outcome.state == FAILED:
        return f"failed too: {outcome.summary()}"
    if outcome.state == STOPPED:
        return "stopped" + (f" ({outcome.note})" if outcome.note else "")
    if outcome.state == ENDED:
        return outcome.note or "ended"
    if outcome.state == DONE:
        return "done"
    return outcome.state


def _answer(future: concurrent.futures.Future[Any]) -> str:
    try:
        return str(next(iter(future.result().values())))
    except Exception as error:  # any failure is the answer, by its type
        return f"no answer ({type(error).__name__})"
