"""How every notebook display writes numbers (``gpu_magics.text.units``, re-exported here), its one inline style, and
its tables.

Styles follow the JupyterLab theme: its font variables and colour variables (with fallbacks for other front
ends), so every display reads in light and dark themes alike.
"""

from __future__ import annotations

import html
from collections.abc import Sequence

from gpu_magics.text.units import (  # the display's numbers, as everywhere else
    DASH,
    format_age,
    format_bytes,
    format_clock,
    format_count,
    format_duration,
    format_number,
    format_percent,
    format_rate,
    format_seconds,
)

STYLE = "font-family:var(--jp-ui-font-family,sans-serif);font-size:var(--jp-ui-font-size1,13px);line-height:1.4"
"""The inline style of every display's outer element: the theme's UI font and type scale."""

SMALL = "font-size:var(--jp-ui-font-size0,11px)"
"""Secondary text (axis labels, footnotes): the theme's smaller size."""

MUTED = "color:var(--jp-ui-font-color2,currentColor)"
"""Secondary text's colour: the theme's dimmer text colour, readable in light and dark themes."""

SUCCESS = "var(--jp-success-color1,#2e7d32)"
WARN = "var(--jp-warn-color1,#ef6c00)"
ERROR = "var(--jp-error-color1,#c62828)"
STATUS_COLOURS = {"running": SUCCESS, "paused": WARN, "closing": ERROR, "closed": ERROR, "unreadable": ERROR}
"""Colours of status words: the theme's success, warning and error colours."""

__all__ = [
    "DASH",
    "ERROR",
    "MUTED",
    "SMALL",
    "STATUS_COLOURS",
    "STYLE",
    "SUCCESS",
    "WARN",
    "format_age",
    "format_bytes",
    "format_clock",
    "format_count",
    "format_duration",
    "format_number",
    "format_percent",
    "format_rate",
    "format_seconds",
    "html_table",
    "text_table",
]


STRIPES = (
    " style='background:var(--jp-layout-color0,transparent)'",
    " style='background:var(--jp-rendermime-table-row-background,transparent)'",
)
"""JupyterLab's table stripes, odd rows then even ones, set on each row where a row has a note under it."""


def text_table(header: Sequence[str], rows: Sequence[Sequence[str]], numeric: Sequence[int] = ()) -> list[str]:
    """Plain-text table lines: columns two spaces apart, the ``numeric`` columns right-aligned."""
    table = [list(header), *(list(row) for row in rows)]
    widths = [max(len(line[i]) for line in table) for i in range(len(header))]
    return [
        "  ".join(
            cell.rjust(widths[i]) if i in numeric else cell.ljust(widths[i]) for i, cell in enumerate(line)
        ).rstrip()
        for line in table
    ]


def html_table(
    header: Sequence[str],
    rows: Sequence[Sequence[str]],
    numeric: Sequence[int] = (),
    titles: Sequence[str] = (),
    below: Sequence[str] = (),
) -> str:
    """An HTML table whose header and cells share each column's alignment (numbers right, text left).

    ``rows`` hold HTML (escape text before); ``header`` is plain text. ``titles`` are optional hover texts,
    one per row (for the first cell). ``below`` is optional HTML, one per row, shown under its row across every
    column (``""``: none), so a long note adds no column.
    """

    def align(i: int) -> str:
        return "right" if i in numeric else "left"

    head = "".join(
        f"<th style='text-align:{align(i)};padding:2px 8px;font-weight:600'>{html.escape(name)}</th>"
        for i, name in enumerate(header)
    )
    body = []
    striped = any(below)  # a note row keeps its rank row's stripe (the theme's stripes count rows, notes too)
    for position, row in enumerate(rows):
        stripe = STRIPES[position % 2] if striped else ""
        cells = []
        for i, cell in enumerate(row):
            title = f" title='{html.escape(titles[position], quote=True)}'" if i == 0 and position < len(titles) else ""
            cells.append(f"<td style='text-align:{align(i)};padding:2px 8px'{title}>{cell}</td>")
        body.append(f"<tr{stripe}>" + "".join(cells) + "</tr>")
        if position < len(below) and below[position]:
            style = "text-align:left;padding:0 8px 2px 24px"
            body.append(f"<tr{stripe}><td colspan='{len(header)}' style='{style}'>{below[position]}</td></tr>")
    return (
        "<table style='border-collapse:collapse;margin:4px 0;font-size:inherit;table-layout:auto'>"
        f"<thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"
    )
