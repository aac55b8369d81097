"""What an SPMD cell leaves: each rank's outcome (value, error, time, peak GPU memory) and the per-rank status
rows, shown live while the cell runs and kept as a static summary in a saved notebook (HTML and text)."""

from __future__ import annotations

import enum
import html
import pickle
import signal
from dataclasses import dataclass, field, replace
from typing import Any

from gpu_magics.display.format import MUTED, format_bytes, format_percent, format_seconds, html_table, text_table
from gpu_magics.spmd.messages import NEVER_RAN, RankError
from gpu_magics.text.units import dropped


class RankState(enum.StrEnum):
    """Where one rank stands in one cell. A string (``outcome.state == "done"`` holds; a status row shows it).

    ::

        RUNNING ──── its reply, no error ─────────────────────────────────────────────> DONE
           │
           ├──────── its reply with an error; its worker did not answer; ─────────────> FAILED
           │         its process ended by itself during the cell
           │
           │   a failure elsewhere or Ctrl-C: every rank still RUNNING is stopped
           ├──────── its reply with the interrupt ────────────────────────────────────> STOPPED
           └──────── it did not stop in time: its process ended, or no answer ────────> ENDED

    Only ``RUNNING`` changes; the others are final for the cell. After ``ENDED`` (or a process that ended by
    itself) the next cell starts every rank anew.
    """

    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"
    STOPPED = "stopped"
    ENDED = "ended"


class RankValue:
    """A rank's value that could not travel to the kernel (a CUDA tensor where the kernel has no GPU, an object
    that does not pickle): its repr, as the rank made it."""

    def __init__(self, rank: int, text: str) -> None:
        self.rank, self.text = rank, text

    def __repr__(self) -> str:
        return self.text


def load_value(rank: int, data: bytes | None, text: str | None) -> Any:
    """The rank's value as an object here where it loads, else a ``RankValue`` with its repr (``None`` where the
    cell left no value)."""
    if data is None and text is None:
        return None
    if data is not None:
        try:
            return pickle.loads(data)
        except Exception as error:  # unpickling may fail any way here (a module missing): the repr is shown
            dropped("loading a rank's value", error)
    return RankValue(rank, text or "")


@dataclass
class RankOutcome:
    """One rank's run of one cell."""

    rank: int
    label: str  # "127.0.0.2 · GPU 1"
    state: RankState = RankState.RUNNING
    value: Any = None
    error: RankError | None = None  # type, message, traceback (the rank's own frames)
    seconds: float | None = None
    peak_memory: int | None = None  # bytes: torch's peak on the rank's GPU, where torch used it
    gpu_util: float | None = None
    gpu_memory: int | None = None
    gpu_memory_total: int | None = None
    rank_memory: int | None = None  # bytes: what the rank's own process holds on its GPU (NVML), where known
    note: str = ""  # "quiet 40 s · cell line 3, in all_reduce (distributed_c10d.py:2501)"
    collectives: int | None = None  # torch collectives the rank entered in this cell, as it said (None: unknown)

    @property
    def never_ran(self) -> bool:
        """Stopped before the cell's message reached the rank: it ran nothing, and has no time of its own."""
        return self.state == RankState.STOPPED and self.error is not None and self.error["message"] == NEVER_RAN

    @property
    def cut_short(self) -> bool:
        """Stopped (or not answering) where it may have been inside a collective: the group may be out of step.
        A rank stopped before it entered any in the cell (another rank's ``NameError``) leaves the group as it was."""
        return self.state in (RankState.STOPPED, RankState.RUNNING) and self.collectives != 0

    def summary(self) -> str:
        """``ValueError: boom`` or the state, in a few words."""
        if self.error is not None and self.state == RankState.FAILED:
            return f"{self.error.get('type')}: {self.error.get('message')}"
        return self.state

    def cell_text(self) -> str:
        """The state as the status row shows it: one line of at most ``CELL_LIMIT`` characters (the full error
        shows below the table)."""
        if self.never_ran:
            return NEVER_RAN
        return clip(self.summary() if self.state == RankState.FAILED else self.state)


CELL_LIMIT = 60  # characters of a status row's state or note: the table's columns stay on one line


def clip(text: str, limit: int = CELL_LIMIT) -> str:
    """``text``'s first line, cut to ``limit`` characters with an ellipsis."""
    first = text.strip().splitlines()[0] if text.strip() else ""
    more = first != text.strip()
    if len(first) > limit:
        return first[: limit - 1].rstrip() + "…"
    return first + (" …" if more else "")


def exit_words(code: int | None, oom: bool = False) -> str:
    """How a process ended: ``exit code 3``, ``SIGKILL``, ``SIGKILL: killed by the OOM killer``."""
    if code is None:
        return "exit status unknown"
    if code >= 0:
        return f"exit code {code}"
    try:
        name = signal.Signals(-code).name
    except ValueError:
        name = f"signal {-code}"
    return f"{name}: killed by the OOM killer" if oom else name


@dataclass
class SpmdResult:
    """What ``%%gpurun spmd -o NAME`` keeps: every rank's outcome, and the cell's wall time."""

    world: str  # "3 ranks on 1 host (CPU)"
    outcomes: list[RankOutcome] = field(default_factory=list)
    wall: float = 0.0

    @property
    def values(self) -> list[Any]:
        """Each rank's last expression value, in rank order (``None`` where it had none or failed)."""
        return [outcome.value for outcome in self.outcomes]

    @property
    def errors(self) -> dict[int, RankError]:
        return {outcome.rank: outcome.error for outcome in self.outcomes if outcome.error is not None}

    def __getitem__(self, rank: int) -> RankOutcome:
        for outcome in self.outcomes:
            if outcome.rank == rank:
                return outcome
        raise KeyError(f"no rank {rank} ran this cell")

    def __repr__(self) -> str:
        lines = [f"SpmdResult: {self.world}, {format_seconds(self.wall)}"]
        for outcome in self.outcomes:
            shown = repr(outcome.value) if outcome.state == RankState.DONE else outcome.summary()
            lines.append(f"  rank {outcome.rank}: {shown}")
        return "\n".join(lines)


@dataclass
class StatusView:
    """The status rows of one SPMD cell (a display object: HTML, and text for a terminal or a saved file)."""

    world: str
    outcomes: list[RankOutcome]
    wall: float = 0.0
    finished: bool = False
    gpus: bool = True  # whether any rank has a GPU (a CPU world shows no GPU column)
    notes: list[str] = field(default_factory=list)  # lines under the headline: the group made for the cell

    def _headline(self) -> str:
        counts: dict[str, int] = {}
        for outcome in self.outcomes:
            counts[outcome.state] = counts.get(outcome.state, 0) + 1
        states = ", ".join(f"{count} {state}" for state, count in counts.items())
        when = "in" if self.finished else "for"
        return f"spmd · {self.world} · {states} {when} {format_seconds(self.wall)}"

    def _rows(self) -> list[list[str]]:
        rows = []
        for outcome in self.outcomes:
            gpu = ""
            if outcome.gpu_util is not None or outcome.gpu_memory is not None:
                memory = format_bytes(outcome.gpu_memory)
                if outcome.gpu_memory_total:
                    memory += f"/{format_bytes(outcome.gpu_memory_total)}"
                if outcome.rank_memory is not None:  # the rank's own, then the whole GPU's
                    memory = f"rank {format_bytes(outcome.rank_memory)} (GPU {memory})"
                gpu = f"{format_percent(outcome.gpu_util)} · {memory}"
            row = [f"rank {outcome.rank}", outcome.label, outcome.cell_text()]
            row.append(format_seconds(outcome.seconds) if outcome.seconds is not None and not outcome.never_ran else "")
            if self.gpus:
                row.append(gpu)
            rows.append(row)
        return rows

    def _notes(self) -> list[str]:
        """Each rank's note (where a quiet rank waits), shown on a line of its own under the rank's row, so the
        table keeps its columns narrow; ``""`` where a rank has none."""
        return [clip(outcome.note, 2 * CELL_LIMIT) for outcome in self.outcomes]

    @property
    def columns(self) -> tuple[str, ...]:
        return ("rank", "where", "state", "time", *(("GPU util · memory",) if self.gpus else ()))

    def __repr__(self) -> str:
        table = text_table(self.columns, self._rows(), (3,))
        lines = [table[0]]
        for row, note in zip(table[1:], self._notes(), strict=True):
            lines.append(row)
            if note:
                lines.append(f"  ↳ {note}")
        return "\n".join([self._headline(), *("  " + note for note in self.notes), *("  " + line for line in lines)])

    def _repr_html_(self) -> str:
        colours = {
            RankState.FAILED: "var(--jp-error-color1, #d32f2f)",
            RankState.DONE: "var(--jp-success-color1, #388e3c)",
        }
        rows = []
        for outcome, row in zip(self.outcomes, self._rows(), strict=True):
            colour = colours.get(outcome.state)
            cells = []
            for i, text in enumerate(row):  # one line each: long text is clipped in the row, shown in full below
                style = "white-space:nowrap" + (f";color:{colour}" if colour and i == 2 else "")
                cells.append(f"<span style='{style}'>{html.escape(text)}</span>")
            rows.append(cells)
        below = [
            f"<span class='gpu-magics-spmd-note' style='{MUTED}'>↳ {html.escape(note)}</span>" if note else ""
            for note in self._notes()
        ]
        notes = "".join(f"<div>{html.escape(note)}</div>" for note in self.notes)
        return (
            f"<div class='gpu-magics-spmd'><div style='font-weight:600'>{html.escape(self._headline())}</div>"
            f"{notes}{html_table(self.columns, rows, (3,), below=below)}</div>"
        )


PRE_STYLE = (  # as the notebook shows a stream's lines: the bars read like the lines printed around them
    "margin:0;padding:0 0 0 var(--jp-code-padding,5px);font-family:var(--jp-code-font-family,monospace);"
    "font-size:var(--jp-code-font-size,13px);line-height:var(--jp-code-line-height,1.3);background:none"
)


@dataclass
class ProgressView:
    """The ranks' live progress bars (a display object): one line per rank, its label kept at every redraw."""

    lines: list[str] = field(default_factory=list)

    def __repr__(self) -> str:
        return "\n".join(self.lines)

    def _repr_html_(self) -> str:
        text = html.escape("\n".join(self.lines))
        return f"<pre class='gpu-magics-spmd-progress' style='{PRE_STYLE}'>{text}</pre>"


FOLDED_LIMIT = 20_000  # lines of a folded block kept in the notebook


@dataclass
class FoldedLines:
    """The lines of the ranks ``--output`` did not show live: a collapsed block that a click opens (a saved
    notebook keeps it); as text, every line."""

    lines: list[Any]  # output.Shown

    def _summary(self) -> str:
        ranks = sorted({int(part) for line in self.lines for part in _label_ranks(line.text)})
        count = len(self.lines)
        label = ",".join(map(str, ranks)) if len(ranks) < 6 else f"{ranks[0]}-{ranks[-1]}"
        return f"{count} line{'s' * (count != 1)} of rank{'s' * (len(ranks) != 1)} {label} (not shown live)"

    def __repr__(self) -> str:
        return "\n".join([self._summary() + ":", *(line.text for line in self.lines[:FOLDED_LIMIT])])

    def _repr_html_(self) -> str:
        body = html.escape("\n".join(line.text for line in self.lines[:FOLDED_LIMIT]))
        return (
            f"<details class='gpu-magics-spmd-folded'><summary>{html.escape(self._summary())}</summary>"
            f"<pre style='margin:0'>{body}</pre></details>"
        )


def _label_ranks(text: str) -> list[int]:
    """The ranks of ``[0-2,5] text``."""
    found: list[int] = []
    for part in text[1 : text.find("]")].split(","):
        low, _, high = part.partition("-")
        if low.isdigit():
            found.extend(range(int(low), int(high or low) + 1))
    return found


def ended_line(ended: list[int], died: dict[int, str], grace_s: float) -> str:
    """``rank 2 did not stop within 3 s and was ended: the next SPMD cell starts new ranks ...``."""
    parts = []
    if ended:
        many = len(ended) > 1
        parts.append(
            f"rank{'s' * many} {', '.join(map(str, ended))} did not stop within {grace_s:.0f} s "
            f"and {'were' if many else 'was'} ended"
        )
    if died:
        many = len(died) > 1
        parts.append(f"the process{'es' * many} of rank{'s' * many} {', '.join(map(str, sorted(died)))} ended")
    return (
        " and ".join(parts) + ": the next SPMD cell starts new ranks (variables start empty; a process group is made "
        "again as before)"
    )


def leading(outcomes: list[RankOutcome]) -> list[RankOutcome]:
    """The rows of a group's init that the cell's code follows: a rank done with it shows running, as it goes on
    to the code (the headline never says "2 done", then "2 running")."""
    return [
        replace(outcome, state=RankState.RUNNING) if outcome.state == RankState.DONE else outcome
        for outcome in outcomes
    ]


def group_note(said: str, seconds: float) -> str:
    """The status table's line for a group made for a cell, from the rank's words for it:
    ``torch.distributed: gloo group of 2 made in 1.97 s``, ``... made again in 2.43 s``; a kept one as said."""
    if said.endswith("(kept)"):
        return said
    return f"{said}{'' if said.endswith(' made again') else ' made'} in {format_seconds(seconds)}"


def other_line(outcome: RankOutcome) -> str:
    if outcome.state == RankState.FAILED:
        return f"failed too: {outcome.summary()}"
    if outcome.state == RankState.STOPPED:
        return NEVER_RAN if outcome.never_ran else "stopped" + (f" ({outcome.note})" if outcome.note else "")
    if outcome.state == RankState.ENDED:
        return outcome.note or "ended"
    if outcome.state == RankState.DONE:
        return "done"
    return outcome.state
