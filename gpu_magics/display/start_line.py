"""The line a cluster's start shows while it goes on ("starting 'x': 1 of 4 GPU workers up, 0 warm ..."), updated
in place, and what replaces it at the end: the cluster's table once it is ready, its one line if it failed.
A saved notebook keeps the last of them."""

from __future__ import annotations

import html
import threading
from collections.abc import Callable
from typing import Any

from IPython.display import DisplayHandle, display

from gpu_magics.cluster.background.starting import StartProgress
from gpu_magics.display.format import ERROR, MUTED, STYLE


class StartText:
    """One line of a start, as HTML (muted while it goes on, in the error colour once it failed) and text."""

    def __init__(self, line: str, failed: bool = False) -> None:
        self.line, self.failed = line, failed

    def _repr_html_(self) -> str:
        colour = f"color:{ERROR}" if self.failed else MUTED
        return f'<div class="gpu-magics-start" style="{STYLE};{colour}">{html.escape(self.line)}</div>'

    def __repr__(self) -> str:
        return self.line


class StartLine:
    """Shows a start's progress in one output (from the start's thread: a display update needs no cell), and
    ``finish`` replaces it with what the start ended in."""

    def __init__(self, ready_view: Callable[[Any], Any]) -> None:
        self._handle: DisplayHandle | None = None
        self._ready_view = ready_view  # the start's result (its ClusterInfo) -> what to show once it is ready
        self._lock = threading.Lock()
        self._finished = False

    @property
    def shown(self) -> bool:
        """Whether the line is on screen."""
        return self._handle is not None

    def show(self, progress: StartProgress) -> None:
        """The listener of the start: redraw the line (the end is ``finish``'s to show)."""
        if progress.finished:
            return
        self._draw(StartText(progress.line()))

    def finish(self, progress: StartProgress, info: Any) -> None:
        """The end: the cluster's view once ready (``info``), else the line that says why not."""
        if progress.phase == "ready" and info is not None:
            self._draw(self._ready_view(info), final=True)
        else:
            self._draw(StartText(progress.line(), failed=progress.phase == "failed"), final=True)

    def retract(self) -> None:
        """Empty the line: the cell's own error says how the start ended."""
        if self._handle is not None:
            self._draw(StartText(""), final=True)

    def _draw(self, view: Any, final: bool = False) -> None:
        with self._lock:
            if self._finished:
                return
            self._finished = final
            if self._handle is None:
                self._handle = display(view, display_id=True)
            else:
                self._handle.update(view)
