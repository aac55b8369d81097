"""One message (a cell, or a group's init) running on the chosen ranks, watched from the kernel's main thread
(``CellRun``): the ranks' lines and progress bars shown as they come, the status rows refreshed, a failing rank
stopping the others, Ctrl-C stopping every rank, a stalled rank named with where it waits, and the cell's
failure said as the first failing rank's traceback and one line for each other rank.
"""

from __future__ import annotations

import concurrent.futures
import queue
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gpu_magics.arrays.caps import over_cap
from gpu_magics.spmd.kernel.ranks import STOP_GRACE_S, Ranks
from gpu_magics.spmd.kernel.view import stalls
from gpu_magics.spmd.kernel.view.output import LineMerger, rank_list
from gpu_magics.spmd.kernel.view.results import (
    FoldedLines,
    RankOutcome,
    RankState,
    SpmdResult,
    StatusView,
    ended_line,
    exit_words,
    leading,
    load_value,
    other_line,
)
from gpu_magics.spmd.kernel.view.shown import Bars, Board, display, log_noise, missing_line, missing_module, print_lines
from gpu_magics.spmd.kernel.world import Rank, World
from gpu_magics.spmd.messages import InitCommand, Line, Reply, RunCommand, Where

if TYPE_CHECKING:
    from IPython.core.interactiveshell import InteractiveShell


STALL_S = 30.0  # seconds without output before a running rank's row says where it waits
REFRESH_S = 0.5  # seconds between two updates of the status rows
STOP_WAIT_S = 12.0  # how long the kernel waits for stopped ranks to answer (they are ended after 3 s)
ABORT_AFTER_S = 1.0  # ranks that have not stopped this long after an interrupt have their process group aborted


@dataclass(frozen=True)
class CellSettings:
    """How a cell shows its ranks (``quiet``: no status rows), when a silent rank is named, how long it may run."""

    quiet: bool = False
    stall_s: float = STALL_S
    timeout_s: float = 300.0


class RankFailure(Exception):
    """A rank's error, shown in the kernel as the rank's own traceback."""


class WorldLost(Exception):
    """A rank had ended before the message reached it (its rank, and how it ended)."""

    def __init__(self, rank: int, how: str) -> None:
        super().__init__(rank, how)
        self.rank, self.how = rank, how


class CellRun:
    """The ranks running one message (a cell, or a group's init), watched from the kernel's main thread."""

    def __init__(
        self,
        shell: InteractiveShell,
        made: Ranks,
        world: World,
        chosen: tuple[Rank, ...],
        settings: CellSettings,
        board: Board,
        leads: bool = False,
    ) -> None:
        self.shell, self.made, self.world, self.chosen, self.settings = shell, made, world, chosen, settings
        self.board, self.leads = board, leads  # leads: a group's init that the cell's code follows
        self.events: queue.Queue[tuple[str, int, Any]] = queue.Queue()
        self.merger = LineMerger([rank.rank for rank in chosen], shown=board.shown)
        self.bars = Bars(board.shown)
        self.outcomes = {rank.rank: RankOutcome(rank.rank, rank.label) for rank in chosen}
        self.by_rank = {rank.rank: rank for rank in chosen}
        self.first_failure: int | None = None
        self.lost_before: tuple[int, str] | None = None  # a rank that had ended before this message reached it
        self.died: dict[int, str] = {}  # rank -> how its process ended by itself during the message
        self.stopping = self.aborted = False
        self.stopped_at: float | None = None
        self.began = 0.0
        self.last_output: dict[int, float] = {}
        self.asked_where: dict[int, float] = {}
        self.stalls: dict[int, str] = {}  # rank -> where it waits, while it prints nothing: kept once it is stopped

    def run(self, message: RunCommand | InitCommand) -> SpmdResult | None:
        """Run ``message`` on the chosen ranks; the result, or ``None`` when the cell failed (shown already)."""
        self.began = time.perf_counter()
        self.cell = message["cell"]
        self.made.listen(self._on_lines)
        pending = self.made.ask_each(self.chosen, message)
        for index, future in pending.items():
            future.add_done_callback(self._on_done(index))
        interrupted = False
        try:
            interrupted = self._watch(pending)
        finally:
            self.made.listen(None)
        if self.lost_before is not None:
            for future in pending.values():
                future.cancel()
            raise WorldLost(*self.lost_before)
        self.bars.end()
        print_lines(self.merger.flush())
        if self.merger.folded:  # --output: the other ranks' lines, in a block that a click opens
            display(FoldedLines(self.merger.folded))
        log_noise(self.merger.noise)
        wall = time.perf_counter() - self.began
        self.board.show(self.view(finished=True))
        ended = [index for index, outcome in self.outcomes.items() if outcome.state == RankState.ENDED]
        self.made.forget_ended(ended, self.died)
        result = SpmdResult(self.world.describe(), [self.outcomes[rank.rank] for rank in self.chosen], wall)
        if interrupted or self.first_failure is not None:
            stopped = any(outcome.cut_short for outcome in self.outcomes.values())
            kept = None if ended or self.died else self.made.check_groups(stopped)
            self._fail(interrupted, ended, kept)
            return None
        return result

    def _on_lines(self, rank: int, cell: str | None, lines: list[Line], progress: dict[str, str]) -> None:
        """Live output from the workers' events: this cell's only (a late event of the cell before is dropped)."""
        if cell == self.cell:
            self.events.put(("lines", rank, lines))
            if progress:
                self.events.put(("progress", rank, progress))

    def _watch(self, pending: dict[int, concurrent.futures.Future[Any]]) -> bool:
        """Take events until every rank answered; whether the user interrupted: Ctrl-C anywhere in the loop, or a
        ``SystemExit`` surfacing here meanwhile, stops every rank and the cell ends in ``KeyboardInterrupt``."""
        interrupted = False
        deadline: float | None = None
        refreshed = 0.0  # the rows are drawn at once
        while pending and self.lost_before is None:
            try:
                refreshed = self._take_event(pending, refreshed)
                if deadline is not None and time.perf_counter() > deadline:
                    for index in list(pending):
                        pending.pop(index).cancel()
                        self.outcomes[index].state = RankState.ENDED
                        self.outcomes[index].note = "did not answer after the stop"
            except (KeyboardInterrupt, SystemExit):
                if not interrupted:
                    interrupted = True
                    self._stop_all(pending)
                    deadline = time.perf_counter() + STOP_WAIT_S
                for index, future in pending.items():  # an answer being taken when it came is taken again
                    if future.done():
                        self.events.put(("done", index, future))
        return interrupted

    def _take_event(self, pending: dict[int, concurrent.futures.Future[Any]], refreshed: float) -> float:
        """One event (or none within 0.1 s) and what follows from it; when the rows were last drawn."""
        try:
            kind, index, payload = self.events.get(timeout=0.1)
        except queue.Empty:
            kind, index, payload = "", -1, None
        now = time.perf_counter()
        if kind == "lines":
            self._take_lines(index, payload, now)
            self.last_output[index] = now
            self.stalls.pop(index, None)
        elif kind == "progress":
            self.bars.update(index, payload)
            self.last_output[index] = now
            self.stalls.pop(index, None)
        elif kind == "done" and index in pending:  # (taken once: an interrupt may have put it again)
            self._finished(index, payload)
            pending.pop(index, None)
            if self.outcomes[index].state == RankState.FAILED and not self.stopping:
                self.first_failure = index
                self._stop_all(pending)
        elif kind == "where":
            self._name_stalls(payload, now)
        print_lines(self.merger.ready(now))
        self.bars.show(now)
        if now - refreshed >= REFRESH_S:
            refreshed = now
            self._check_stalls(now)
            self.board.show(self.view())
        if self.stopped_at is not None and not self.aborted and pending and now - self.stopped_at > ABORT_AFTER_S:
            self.aborted = True  # a rank waiting in a collective (NCCL) answers once its group is aborted
            self.made.abort_groups()
        return refreshed

    def _finished(self, index: int, future: concurrent.futures.Future[Any]) -> None:
        """A rank's answer: its outcome. A rank stopped while it stalled keeps where it waited as its note (the
        final table says why the cell was stopped)."""
        self._take_answer(index, future)
        stalled = self.stalls.pop(index, None)
        outcome = self.outcomes[index]
        if stalled and self.stopping and outcome.state != RankState.DONE and stalled not in outcome.note:
            outcome.note = " · ".join(filter(None, [outcome.note, stalled]))

    def _take_answer(self, index: int, future: concurrent.futures.Future[Any]) -> None:
        outcome = self.outcomes[index]
        outcome.seconds = time.perf_counter() - self.began
        failed = concurrent.futures.CancelledError() if future.cancelled() else future.exception()
        # the call's failure, of any kind (a SystemExit or CancelledError of the client's loop too), is its outcome
        reply: Reply | BaseException = failed or next(iter(future.result().values()))
        if isinstance(reply, BaseException):
            outcome.state, outcome.error = (
                RankState.FAILED,
                {
                    "type": type(reply).__name__,
                    "message": f"its worker did not answer ({reply})",
                    "traceback": "",
                },
            )
            if not self.stopping:  # its worker died or left: the next cell starts a new world, groups and all
                self.died[index] = f"its worker did not answer: {type(reply).__name__}"
            return
        self.bars.answered(index)
        self._take_lines(index, reply.get("lines", ()), time.perf_counter())
        self.merger.finished(index)
        outcome.seconds = reply.get("seconds", outcome.seconds)
        outcome.collectives = reply.get("collectives")
        outcome.peak_memory = reply.get("peak_memory")
        outcome.note = ""
        if reply.get("ended"):
            how = exit_words(reply.get("exit_code"), bool(reply.get("oom")))
            if reply.get("before") and not self.stopping:
                self.lost_before = (index, how)
                return
            outcome.state = RankState.ENDED
            outcome.note = "its process was ended" if self.stopping else ""  # a failure's error says it once
            if not self.stopping:
                self.died[index] = how
                outcome.state = RankState.FAILED
                outcome.error = {
                    "type": "RankProcessEnded",
                    "message": f"the rank process ended ({how})",
                    "traceback": "",
                }
            return
        said = reply.get("error")
        if said is None:
            outcome.state = RankState.DONE
            outcome.value = load_value(index, reply.get("value"), reply.get("repr"))
        elif said.get("interrupted") or (self.stopping and said.get("type") == "SystemExit"):  # exit on Ctrl-C
            outcome.state, outcome.error = RankState.STOPPED, {**said, "interrupted": True}
        else:
            outcome.state, outcome.error = RankState.FAILED, said

    def _take_lines(self, index: int, lines: Sequence[Line], now: float) -> None:
        """A rank's lines: a finished progress bar stays with the bars, the others are merged into the output."""
        rest: list[Line] = []
        for line in lines:
            if line[1] != "bar":
                rest.append(line)
            elif not self.bars.finish(index, int(line[0]), line[2]):  # not shown live: with the rank's lines
                rest.append((line[0], "err", line[2], line[3]))
        self.merger.add(index, rest, now)

    def _stop_all(self, pending: dict[int, concurrent.futures.Future[Any]]) -> None:
        self.stopping = True
        self.stopped_at = time.perf_counter()
        if pending:
            self.made.stop([self.by_rank[index] for index in pending], self.cell)

    def _check_stalls(self, now: float) -> None:
        """Every ``stall_s`` while a rank prints nothing, ask every rank where it is: the stalled rank's row then
        names the collective it waits in and the ranks that never entered it. Not once the ranks are being stopped:
        the rows keep where each waited when the stop came."""
        if self.stopping:
            return
        stalled = [
            index
            for index, outcome in self.outcomes.items()
            if outcome.state == RankState.RUNNING
            and now - self.last_output.get(index, self.began) >= self.settings.stall_s
        ]
        if stalled and now - self.asked_where.get(-1, 0.0) >= self.settings.stall_s:
            self.asked_where[-1] = now
            future = self.made.where_all()
            future.add_done_callback(lambda done: self.events.put(("where", -1, done)))

    def _name_stalls(self, future: concurrent.futures.Future[Any], now: float) -> None:
        if self.stopping:  # an answer that comes after the stop: the rows keep what they said when it came
            return
        found: dict[str, Where | BaseException]
        try:
            found = dict(future.result())
        except (OSError, RuntimeError, TimeoutError, ValueError) as error:  # the question failed: the rows say so
            found = {rank.member.address: {"text": f"no answer ({type(error).__name__})"} for rank in self.chosen}
        by_address = {rank.member.address: rank.rank for rank in self.world.ranks}
        answers = {
            by_address[address]: answer for address, answer in found.items() if not isinstance(answer, BaseException)
        }
        for index, outcome in self.outcomes.items():
            quiet = now - self.last_output.get(index, self.began)
            if outcome.state == RankState.RUNNING and quiet >= self.settings.stall_s:
                outcome.note = f"no output for {quiet:.0f} s · {stalls.describe(index, answers) or 'no answer'}"
                self.stalls[index] = outcome.note

    def _on_done(self, index: int) -> Callable[[concurrent.futures.Future[Any]], None]:
        def put(done: concurrent.futures.Future[Any]) -> None:
            self.events.put(("done", index, done))

        return put

    def view(self, finished: bool = False) -> StatusView:
        self._add_telemetry()
        outcomes = [self.outcomes[rank.rank] for rank in self.chosen]
        outcomes, finished = (leading(outcomes), False) if self.leads else (outcomes, finished)
        gpus = any(rank.gpu for rank in self.chosen)
        wall = time.perf_counter() - self.board.began
        return StatusView(self.world.describe(), outcomes, wall, finished, gpus, list(self.board.notes))

    def _add_telemetry(self) -> None:
        from gpu_magics.cluster.control import queries

        found = queries.telemetry()
        if found is None or self.world.kind == "cpu":
            return
        # the workers' latest reports, as this kernel keeps them: read here, no round trip
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

    def _fail(self, interrupted: bool, ended: list[int], kept: str | None) -> None:
        """The cell fails: the first failing rank's traceback (or the interrupt) and one line per other rank."""
        from gpu_magics.gpurun.execute import mark_failed

        lines: list[str] = []
        said: set[int] = set()  # ranks whose failure is said already
        if self.first_failure is not None and not interrupted:
            first = self.outcomes[self.first_failure]
            failure: Mapping[str, Any] = first.error or {}
            missing = missing_module(failure)
            if missing is not None:  # not a bug in the cell: a package the ranks lack, one line
                said = {o.rank for o in self.outcomes.values() if o.error and missing_module(o.error) == missing}
                where = f"rank{'s' * (len(said) > 1)} {rank_list(said)}"
                lines.append(missing_line(missing, where))
                name, message = "ModuleNotFoundError", f"no module named {missing!r} where {where} run"
            else:
                said = {first.rank}
                lines.append(f"rank {first.rank} ({first.label}) failed first:")
                kind, text = str(failure.get("type")), str(failure.get("message"))
                gpu = next((r.member.gpu_uuid for r in self.world.ranks if r.rank == first.rank), None)
                capped = over_cap.rank_line(kind, text, first.rank, gpu)  # its share of the cap stopped it
                lines.append(
                    f"{kind}: {capped}" if capped else str(failure.get("traceback") or f"{kind}: {text}").rstrip()
                )
                name, message = str(failure.get("type", "RankFailure")), f"rank {first.rank}: {failure.get('message')}"
        else:
            name, message = "KeyboardInterrupt", "every rank was stopped"
        for index, outcome in self.outcomes.items():
            if index in said and not interrupted:
                continue
            lines.append(f"rank {index}: {other_line(outcome)}")
        if ended or self.died:
            lines.append(ended_line(ended, self.died, STOP_GRACE_S))
        elif kept:
            lines.append(kept)
        error_type = KeyboardInterrupt if name == "KeyboardInterrupt" else type(name, (RankFailure,), {})
        error = error_type(message)
        self.shell._showtraceback(error_type, error, lines)
        mark_failed(self.shell, error)
