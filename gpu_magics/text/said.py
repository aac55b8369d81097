"""A line the package says in the notebook outside an error (a park, a resume, a setting that applies at once):
HTML in the theme's UI font, so that it wraps between words as the displays do (a long stdout line breaks mid-word
in JupyterLab), and its text in a terminal or a saved notebook's plain form.

Where it goes: the cell at hand. From the cell's own thread, or from a request that runs no cell (the side panel's
silent requests, whose replies it reads), it is shown at once. From another thread (the scheduler's plugin resuming
the cluster for a graph, the idle watch parking it) it goes to the cell that runs now: it is shown in a copy of that
cell's context taken as it began, as the plain cell's progress line is (``gpurun.live.plain_progress``), so the kernel
sends it with that cell's message. With no cell running it is kept, and said once at the top of the next cell (a
thread's line shown in another context would reach no cell: the kernel sends it with a request long answered)."""

from __future__ import annotations

import contextlib
import contextvars
import html
import threading
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from IPython.core.interactiveshell import InteractiveShell

STYLE = "font-family:var(--jp-ui-font-family,sans-serif);font-size:var(--jp-ui-font-size1,13px);line-height:1.4"
"""The displays' own outer style (``display.format.STYLE``)."""

_KEY = "_gpu_magics_cell_at_hand"


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


class CellAtHand:
    """The cell that runs now (IPython's ``pre_run_cell`` to ``post_run_cell``; silent requests run none): its
    thread and a copy of its context; and the lines kept for the next cell."""

    def __init__(self) -> None:
        self.lock = threading.Lock()  # held while a line goes to the cell: the cell ends after it, not during
        self.context: contextvars.Context | None = None
        self.thread: int | None = None
        self.kept: list[SaidLine] = []

    def before_cell(self, info: Any = None) -> None:
        with self.lock:
            self.context, self.thread = contextvars.copy_context(), threading.get_ident()
            kept, self.kept = self.kept, []
        for line in kept:
            _show(line)

    def after_cell(self, result: Any = None) -> None:
        with self.lock:
            self.context = self.thread = None

    def say(self, line: SaidLine) -> None:
        with self.lock:
            if self.context is None:
                if threading.current_thread() is not threading.main_thread():  # between cells: the next one says it
                    self.kept.append(line)
                    return
            elif self.thread != threading.get_ident():  # from another thread: in the running cell
                self.context.copy().run(_show, line)
                return
        _show(line)  # the cell's own thread, or a silent request


def _show(line: SaidLine) -> None:
    from IPython.display import display

    display(line)


def say(line: str) -> None:
    """Show ``line`` in the output of the cell at hand (see the module's docstring)."""
    from IPython import get_ipython

    at_hand = getattr(get_ipython(), _KEY, None)
    if isinstance(at_hand, CellAtHand):
        at_hand.say(SaidLine(line))
    else:  # not loaded as an extension: where display puts it
        _show(SaidLine(line))


def cell_running() -> bool:
    """Whether a cell runs now (between IPython's ``pre_run_cell`` and ``post_run_cell``)."""
    from IPython import get_ipython

    at_hand = getattr(get_ipython(), _KEY, None)
    return isinstance(at_hand, CellAtHand) and at_hand.context is not None


def install(shell: InteractiveShell) -> None:
    """Follow the shell's cells (at ``%load_ext``)."""
    if isinstance(getattr(shell, _KEY, None), CellAtHand):
        return
    made = CellAtHand()
    setattr(shell, _KEY, made)
    shell.events.register("pre_run_cell", made.before_cell)
    shell.events.register("post_run_cell", made.after_cell)


def uninstall(shell: InteractiveShell) -> None:
    """Follow them no more (``%unload_ext``); lines kept for the next cell are dropped."""
    made = getattr(shell, _KEY, None)
    if not isinstance(made, CellAtHand):
        return
    for event, callback in (("pre_run_cell", made.before_cell), ("post_run_cell", made.after_cell)):
        with contextlib.suppress(ValueError):  # the user took it away
            shell.events.unregister(event, callback)
    delattr(shell, _KEY)
