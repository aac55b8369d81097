"""What a ``%%gpurun`` reports: ``RunResult`` for one backend, ``CompareResult`` for ``--compare``.

Both have a one-line text form (their ``str``), an HTML form for notebooks and ``to_json()``.
"""

from __future__ import annotations

import html
import statistics
from dataclasses import dataclass, field
from typing import Any

from gpu_magics.display.format import DASH, STYLE, format_seconds


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

    def __str__(self) -> str:
        parts = [self.backend, self.hardware, self.timing_text()]
        if self.tasks is not None:
            parts.append(f"{self.tasks:,} dask task{'s' if self.tasks != 1 else ''}")
        if self.failed:
            parts.append("failed")
        text = " · ".join(parts)
        for note in self.notes:
            text += f"\n  note: {note}"
        if self.monitor is not None:
            text += f"\n  {self.monitor}"
        return text

    def __repr__(self) -> str:
        return f"<RunResult {str(self).splitlines()[0]}>"

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(str(self))

    def _repr_html_(self) -> str:
        cells = [
            f"<b>{html.escape(self.backend)}</b>",
            html.escape(self.hardware),
            f"<b>{html.escape(self.timing_text())}</b>",
        ]
        if self.tasks is not None:
            cells.append(f"{self.tasks:,} dask tasks")
        if self.failed:
            cells.append("<span style='color:var(--jp-error-color1,#c00)'>failed</span>")
        body = " &middot; ".join(cells)
        for note in self.notes:
            body += f"<br><span style='opacity:.75'>note: {html.escape(note)}</span>"
        if self.monitor is not None:
            short_html = getattr(self.monitor, "short_html", None)
            body += short_html() if callable(short_html) else f"<br>{html.escape(str(self.monitor))}"
        return f"<div class='gpu-magics-run' style='{STYLE}'>&#9201; {body}</div>"

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


@dataclass(frozen=True)
class CompareResult:
    """The same cell run on several backends, the first being the reference."""

    rows: tuple[CompareRow, ...]

    def __getitem__(self, backend: str) -> RunResult:
        for row in self.rows:
            if row.result.backend == backend:
                return row.result
        raise KeyError(backend)

    @property
    def agrees(self) -> bool:
        """Whether every backend's value agreed with the reference's."""
        return all(not row.agreement.startswith("differs") for row in self.rows)

    def _table(self) -> list[tuple[str, str, str, str, str]]:
        lines = []
        for row in self.rows:
            speedup = DASH if row.speedup is None else f"{row.speedup:.2f}x"
            lines.append((row.result.backend, row.result.hardware, row.result.timing_text(), speedup, row.agreement))
        return lines

    def __str__(self) -> str:
        header = ("backend", "hardware", "wall time", "speed-up", "agreement")
        table = [header, *self._table()]
        widths = [max(len(line[i]) for line in table) for i in range(len(header))]
        text = "\n".join("  ".join(cell.ljust(widths[i]) for i, cell in enumerate(line)).rstrip() for line in table)
        for row in self.rows:
            for note in row.result.notes:
                text += f"\n  note ({row.result.backend}): {note}"
        return text

    def __repr__(self) -> str:
        return "<CompareResult\n" + str(self) + "\n>"

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(str(self))

    def _repr_html_(self) -> str:
        head = "".join(
            f"<th style='text-align:left;padding:2px 8px'>{name}</th>"
            for name in ("backend", "hardware", "wall time", "speed-up", "agreement")
        )
        body = "".join(
            "<tr>" + "".join(f"<td style='padding:2px 8px'>{html.escape(cell)}</td>" for cell in line) + "</tr>"
            for line in self._table()
        )
        notes = "".join(
            f"<div style='opacity:.75'>note ({html.escape(row.result.backend)}): {html.escape(note)}</div>"
            for row in self.rows
            for note in row.result.notes
        )
        return (
            f"<div class='gpu-magics-compare' style='{STYLE}'>"
            f"<table style='border-collapse:collapse'><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"
            f"{bar_chart_svg(self)}{notes}</div>"
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "rows": [{**row.result.to_json(), "speedup": row.speedup, "agreement": row.agreement} for row in self.rows]
        }


def bar_chart_svg(comparison: CompareResult, width: int = 420, bar_height: int = 16) -> str:
    """A small horizontal bar chart of wall times (log-free, longest bar = slowest backend)."""
    rows = comparison.rows
    if not rows:
        return ""
    slowest = max(row.result.wall_time for row in rows) or 1.0
    label_width, gap = 90, 4
    height = len(rows) * (bar_height + gap) + gap
    parts = [
        f"<svg xmlns='http://www.w3.org/2000/svg' width='{width}' height='{height}' role='img' "
        f"aria-label='wall time per backend' style='margin-top:6px'>"
    ]
    for position, row in enumerate(rows):
        y = gap + position * (bar_height + gap)
        span = max(1.0, (width - label_width - 80) * row.result.wall_time / slowest)
        label = html.escape(row.result.backend)
        parts.append(
            f"<text x='0' y='{y + bar_height - 4}' font-size='11' fill='currentColor'>{label}</text>"
            f"<rect x='{label_width}' y='{y}' width='{span:.1f}' height='{bar_height}' rx='2' "
            f"fill='{'#76b900' if 'gpu' in row.result.backend else '#6b8fb5'}'/>"
            f"<text x='{label_width + span + 4:.1f}' y='{y + bar_height - 4}' font-size='11' "
            f"fill='currentColor'>{html.escape(format_seconds(row.result.wall_time))}</text>"
        )
    parts.append("</svg>")
    return "".join(parts)
