"""The live GPU panel: an HTML output that the sampler's snapshots redraw in place.

Every redraw replaces the output's HTML and text (a display update, not a widget), so a saved notebook keeps the
last view and shows it after the kernel is gone, in JupyterLab and in an HTML export alike.
"""

from __future__ import annotations

import contextlib
import html
import threading
from collections import deque
from collections.abc import Iterator
from typing import Any, Protocol

from IPython.core.interactiveshell import InteractiveShell
from IPython.display import DisplayHandle, display

from gpu_magics.display.format import MUTED
from gpu_magics.display.monitor_view import live_panel, live_panel_text
from gpu_magics.monitor.models import Snapshot
from gpu_magics.monitor.sampler import Sampler


def can_show_widgets(shell: InteractiveShell | None) -> bool:
    """Whether ``shell`` runs in a kernel whose front end redraws outputs in place (not a terminal IPython)."""
    return shell is not None and getattr(shell, "kernel", None) is not None


class ProgressSource(Protocol):
    """What the panel shows under its title while a cell runs (``gpurun.live.progress.Progress``)."""

    def text(self) -> str | None: ...

    def stop(self) -> None: ...


class PanelSlot:
    """One output that several displays take in turn (the live panels of a ``--compare``, then its table)."""

    def __init__(self) -> None:
        self.handle: DisplayHandle | None = None

    def show(self, obj: Any) -> DisplayHandle:
        """Show ``obj`` in the slot: a new output the first time, the same output after."""
        if self.handle is None:
            self.handle = display(obj, display_id=True)
        else:
            self.handle.update(obj)
        assert self.handle is not None
        return self.handle


_slot = threading.local()


@contextlib.contextmanager
def shared_slot() -> Iterator[PanelSlot]:
    """Inside the block, live panels shown with ``show_panel`` take turns in one output."""
    previous = getattr(_slot, "current", None)
    _slot.current = slot = PanelSlot()
    try:
        yield slot
    finally:
        _slot.current = previous


def show_panel(obj: Any) -> DisplayHandle:
    """Display ``obj`` in the current ``shared_slot``, or as a new output outside one."""
    slot: PanelSlot | None = getattr(_slot, "current", None)
    return (slot or PanelSlot()).show(obj)


class LivePanel:
    """The newest snapshot with sparklines of the recent ones, and the running cell's progress, if any.

    ``show()`` displays it; from ``start()`` to ``stop()`` every sampler snapshot redraws it in place.
    """

    def __init__(
        self, sampler: Sampler, title: str = "GPUs", history: int = 60, progress: ProgressSource | None = None
    ) -> None:
        self.sampler = sampler
        self.title = title
        self.progress = progress
        self._recent: deque[Snapshot] = deque(sampler.history()[-history:], maxlen=history)
        self._lock = threading.Lock()
        self._unsubscribe: Any = None
        self.handle: DisplayHandle | None = None

    def show(self, in_slot: bool = True) -> DisplayHandle:
        """Display the panel (in the current ``shared_slot``, if one is open and ``in_slot``) and remember its
        output."""
        self.handle = show_panel(self) if in_slot else PanelSlot().show(self)
        return self.handle

    def start(self) -> None:
        if self._unsubscribe is None:
            self._unsubscribe = self.sampler.subscribe(self._on_snapshot)

    def stop(self) -> None:
        unsubscribe, self._unsubscribe = self._unsubscribe, None
        if unsubscribe is not None:
            unsubscribe()
        if self.progress is not None:
            self.progress.stop()

    @property
    def running(self) -> bool:
        return self._unsubscribe is not None

    def _on_snapshot(self, snapshot: Snapshot) -> None:
        with self._lock:
            self._recent.append(snapshot)
        if self.handle is not None:
            self.handle.update(self)

    def snapshot(self) -> StaticPanel:
        """The current view as a static display (what a stopped panel leaves behind)."""
        with self._lock:
            recent = list(self._recent)
        return StaticPanel(recent, self.title)

    def html(self) -> str:
        with self._lock:
            recent = list(self._recent)
        line = self.progress.text() if self.progress is not None else None
        progress = f"<div class='gpu-magics-progress' style='{MUTED}'>{html.escape(line)}</div>" if line else ""
        return live_panel(recent, self.title, progress)

    def text(self) -> str:
        with self._lock:
            latest = self._recent[-1] if self._recent else None
        line = self.progress.text() if self.progress is not None else None
        return "\n".join([self.title, *([line] if line else []), live_panel_text(latest)])

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, str]:
        return {"text/html": self.html(), "text/plain": self.text()}


class StaticPanel:
    """A stopped panel: the last view, as HTML and text."""

    def __init__(self, recent: list[Snapshot], title: str) -> None:
        self.recent = recent
        self.title = title

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, str]:
        latest = self.recent[-1] if self.recent else None
        return {
            "text/html": live_panel(self.recent, f"{self.title} · stopped"),
            "text/plain": f"{self.title} · stopped\n{live_panel_text(latest)}",
        }
