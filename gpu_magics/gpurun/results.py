"""What a ``%%gpurun`` reports: ``RunResult`` for one backend, ``CompareResult`` for ``--compare``.

Both have a one-line text form (their ``str``), an HTML form for notebooks and ``to_json()``.
"""

from __future__ import annotations

import html
import statistics
from dataclasses import dataclass, field
from typing import Any

from gpu_magics.display.format import DASH, MUTED, SMALL, STYLE, format_seconds, html_table, text_table
from gpu_magics.gpurun.timing.time_split import TimeSplit


@dataclass(frozen=True)
class RunResult:
    """The figures of one backend's run of a cell."""

    backend: str
    hardware: str
    times: tuple[float, ...]
    tasks: int | None = None
    notes: tuple[str, ...] = ()
    failed: bool = False
    monitor: Any = None  # per-GPU or host figures from the live monitor, when it ran
    extras: dict[str, Any] = field(default_factory=dict)
    split: TimeSplit | None = None  # where the (best) run's time went, on GPU backends and clusters
    advice: str | None = None  # one line derived from the split, when it points to a fix
    cold_run: float | None = None  # the untimed warm-up run's wall time, when the cell ran once before timing
    cold: bool = False  # the (first) timed run was also the backend's first: first-call costs included

    @property
    def best(self) -> float:
        """The shortest wall time of the runs."""
        return min(self.times)

    @property
    def median(self) -> float:
        """The median wall time of the runs."""
        return statistics.median(self.times)

    @property
    def wall_time(self) -> float:
        """The figure to quote: the only run's time, or the best of several."""
        return self.best

    def timing_text(self) -> str:
        if len(self.times) == 1:
            return format_seconds(self.times[0])
        return f"best {format_seconds(self.best)}, median {format_seconds(self.median)} of {len(self.times)} runs"

    def headline(self) -> str:
        """``'gpu · 1x NVIDIA H200 (GPU 0) · 518 ms · 238 dask tasks'``."""
        parts = [self.backend, self.hardware, self.timing_text()]
        tasks = None if self.tasks is None else f"{self.tasks:,} dask task{'s' if self.tasks != 1 else ''}"
        if self.failed:  # what the count is then: the tasks that finished before it failed or was interrupted
            parts.append(f"failed after {tasks} finished" if tasks else "failed")
        elif tasks:
            parts.append(tasks)
        return " · ".join(parts)

    def __str__(self) -> str:
        lines = [self.headline()]
        lines += [f"  note: {note}" for note in self.notes]
        if self.split is not None:
            lines.append(f"  {self.split.line()}")
        if self.advice:
            lines.append(f"  advice: {self.advice}")
        if self.monitor is not None:
            lines += [f"  {line}" for line in str(self.monitor).splitlines()]
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"<RunResult {self.headline()}>"

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(str(self))

    def _repr_html_(self) -> str:
        cells = [
            f"<b>{html.escape(self.backend)}</b>",
            html.escape(self.hardware),
            f"<b>{html.escape(self.timing_text())}</b>",
        ]
        if self.tasks is not None:
            cells.append(f"{self.tasks:,} dask task{'s' if self.tasks != 1 else ''}")
        if self.failed:
            cells.append("<span style='color:var(--jp-error-color1,#c62828)'>failed</span>")
        parts = [f"<div class='gpu-magics-run' style='{STYLE}'><div>{' &middot; '.join(cells)}</div>"]
        parts += [f"<div style='{MUTED}'>note: {html.escape(note)}</div>" for note in self.notes]
        if self.split is not None:
            parts.append(f"<div class='gpu-magics-split'>{html.escape(self.split.line())}</div>")
        if self.advice:
            parts.append(f"<div class='gpu-magics-advice'><b>advice:</b> {html.escape(self.advice)}</div>")
        if self.monitor is not None:  # the monitor's figures and charts, under the headline
            details = getattr(self.monitor, "_repr_html_", None)
            parts.append(details() if callable(details) else f"<div>{html.escape(str(self.monitor))}</div>")
        return "".join(parts) + "</div>"

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "backend": self.backend,
            "hardware": self.hardware,
            "times": list(self.times),
            "best": self.best,
            "median": self.median,
            "tasks": self.tasks,
            "notes": list(self.notes),
            "failed": self.failed,
            "split": None if self.split is None else self.split.to_json(),
            "advice": self.advice,
            "cold_run": self.cold_run,
            "cold": self.cold,
        }
        to_json = getattr(self.monitor, "to_json", None)
        if callable(to_json):
            data["monitor"] = to_json()
        return data


@dataclass(frozen=True)
class CompareRow:
    """One backend's line in a comparison."""

    result: RunResult
    speedup: float | None
    agreement: str


NOISY_SPREAD = 0.5  # runs of one backend that differ by more than this share of their median are noisy


@dataclass(frozen=True)
class CompareResult:
    """The same cell run on several backends, the first being the reference; ``skipped`` holds the backends
    that could not run here, each with why (``("gpu", "CuPy not installed")``)."""

    rows: tuple[CompareRow, ...]
    skipped: tuple[tuple[str, str], ...] = ()

    def __getitem__(self, backend: str) -> RunResult:
        for row in self.rows:
            if row.result.backend == backend:
                return row.result
        raise KeyError(backend)

    @property
    def agrees(self) -> bool:
        """Whether every backend's value agreed with the reference's."""
        return all(not row.agreement.startswith("differs") for row in self.rows)

    def _repeated(self) -> bool:
        return any(len(row.result.times) > 1 for row in self.rows)

    def _header(self) -> tuple[str, ...]:
        middle = ("best", "median") if self._repeated() else ("wall time",)
        return ("backend", "hardware", *middle, "speed-up", "agreement")

    def _numeric(self) -> tuple[int, ...]:
        return tuple(range(2, len(self._header()) - 1))

    def _table(self) -> list[tuple[str, ...]]:
        lines: list[tuple[str, ...]] = []
        for row in self.rows:
            result = row.result
            speedup = DASH if row.speedup is None else f"{row.speedup:.2f}x"
            times: tuple[str, ...] = (format_seconds(result.best),)
            if self._repeated():
                times += (format_seconds(result.median) if len(result.times) > 1 else DASH,)
            lines.append((result.backend, result.hardware, *times, speedup, row.agreement))
        return lines

    def notes(self) -> list[str]:
        """Each backend's own notes, where GPU backends' time went and any advice, then one line naming the
        backends skipped and why."""
        lines = [f"{row.result.backend}: {note}" for row in self.rows for note in row.result.notes]
        lines += self._warm_up_notes()
        lines += [f"{row.result.backend}: {row.result.split.line()}" for row in self.rows if row.result.split]
        lines += [f"{row.result.backend}: advice: {row.result.advice}" for row in self.rows if row.result.advice]
        if self.skipped:
            lines.append("Skipped: " + "; ".join(f"{name} ({why})" for name, why in self.skipped))
        return lines

    def _warm_up_notes(self) -> list[str]:
        """How warm the times are: the untimed first runs, and the rows timed cold (too long to run twice)."""
        warmed = [row.result for row in self.rows if row.result.cold_run is not None]
        lines = []
        if warmed:
            firsts = ", ".join(f"{r.backend} {format_seconds(r.cold_run or 0.0)}" for r in warmed)
            lines.append(f"warm times: each backend ran the cell once before it was timed (first runs: {firsts})")
        lines += [
            f"{row.result.backend}: timed cold (a long first run is not repeated): first-call costs are in its time"
            for row in self.rows
            if row.result.cold
        ]
        noisy = self._noise_note()
        return [*lines, noisy] if noisy else lines

    def _noise_note(self) -> str | None:
        """One line where the timings were noisy (a warm run slower than its backend's first run, or runs that
        differ by more than half their median), with the option that steadies them."""
        found = []
        for row in self.rows:
            result = row.result
            if result.failed or result.cold:  # a run timed cold is slower by its first-call costs: not noise
                continue
            if result.cold_run is not None and result.best > result.cold_run:
                found.append(
                    f"{result.backend}'s warm run ({format_seconds(result.best)}) took longer than its first "
                    f"({format_seconds(result.cold_run)})"
                )
            elif len(result.times) > 1 and max(result.times) - min(result.times) > NOISY_SPREAD * result.median:
                found.append(
                    f"{result.backend}'s runs spread from {format_seconds(min(result.times))} to "
                    f"{format_seconds(max(result.times))}"
                )
        if not found:
            return None
        most = max(len(row.result.times) for row in self.rows)
        repeat = f"a larger --repeat than {most}" if most > 1 else "--repeat 5"
        return (
            f"the timings were noisy ({'; '.join(found)}): run the cell again with {repeat} "
            "for a best and a median of several runs"
        )

    def __str__(self) -> str:
        lines = text_table(self._header(), self._table(), self._numeric())
        return "\n".join(lines + [f"  {note}" for note in self.notes()])  # indented: not a row

    def __repr__(self) -> str:
        return "<CompareResult\n" + str(self) + "\n>"

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(str(self))

    def _repr_html_(self) -> str:
        rows = [[html.escape(cell) for cell in line] for line in self._table()]
        notes = "".join(f"<div style='{MUTED}'>{html.escape(note)}</div>" for note in self.notes())
        return (
            f"<div class='gpu-magics-compare' style='{STYLE}'>"
            f"{html_table(self._header(), rows, self._numeric())}{notes}{bar_chart_svg(self)}</div>"
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "rows": [{**row.result.to_json(), "speedup": row.speedup, "agreement": row.agreement} for row in self.rows],
            "skipped": [{"backend": name, "reason": why} for name, why in self.skipped],
        }


def bar_chart_svg(comparison: CompareResult, width: int = 460, bar_height: int = 16) -> str:
    """A small horizontal bar chart of wall times (log-free, longest bar = slowest backend); a backend run more
    than once is drawn at its best time, labelled ``best of N``."""
    rows = comparison.rows
    if not rows:
        return ""
    slowest = max(row.result.wall_time for row in rows) or 1.0
    label_width, value_width, gap = 90, 130, 4
    height = len(rows) * (bar_height + gap) + gap
    parts = [
        f"<svg xmlns='http://www.w3.org/2000/svg' width='{width}' height='{height}' role='img' "
        f"aria-label='wall time per backend' style='margin-top:6px;{SMALL}'>"
    ]
    for position, row in enumerate(rows):
        y = gap + position * (bar_height + gap)
        result = row.result
        span = max(1.0, (width - label_width - value_width) * result.wall_time / slowest)
        value = format_seconds(result.wall_time)
        if len(result.times) > 1:
            value += f" (best of {len(result.times)})"
        parts.append(
            f"<text x='0' y='{y + bar_height - 4}' fill='currentColor'>{html.escape(result.backend)}</text>"
            f"<rect x='{label_width}' y='{y}' width='{span:.1f}' height='{bar_height}' rx='2' "
            f"fill='{'#76b900' if 'gpu' in result.backend else '#6b8fb5'}'/>"
            f"<text x='{label_width + span + 4:.1f}' y='{y + bar_height - 4}' "
            f"fill='currentColor'>{html.escape(value)}</text>"
        )
    parts.append("</svg>")
    return "".join(parts)
