"""A line the package says in the notebook outside an error (a park, a resume, a setting that applies at once):
HTML in the theme's UI font, so that it wraps between words as the displays do (a long stdout line breaks mid-word
in JupyterLab), and its text in a terminal or a saved notebook's plain form. From a thread, it goes to the cell whose
context the thread runs in, as ``print`` does."""

from __future__ import annotations

import html
from typing import Any

STYLE = "font-family:var(--jp-ui-font-family,sans-serif);font-size:var(--jp-ui-font-size1,13px);line-height:1.4"
"""The displays' own outer style (``display.format.STYLE``)."""


class SaidLine:
    """One line, as HTML and as text."""

    def __init__(self, line: str) -> None:
        self.line = line

    def _repr_html_(self) -> str:
        return f'<div class="gpu-magics-said" style="{STYLE}">{html.escape(self.line)}</div>'

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(self.line)

    def __repr__(self) -> str:
        return self.line


def say(line: str) -> None:
    """Show ``line`` in the output of the cell at hand."""
    from IPython.display import display

    display(SaidLine(line))
