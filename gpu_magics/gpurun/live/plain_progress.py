"""A plain cell's progress while the cluster works for it: a plain cell (``x.sum().compute()`` after
``%gpucluster``, or under a session backend) shows nothing while it runs, however long.

While a cluster's client is in use, each plain cell reads the scheduler's counts as it begins; once it has run
``QUIET_FOR`` seconds and the cluster was given tasks since, one line shows under it, the line of the ``%%gpurun``
panel (``9.12 s elapsed · 0 / 2 dask tasks · 180 / 400 chunks``), redrawn every ``POLL_EVERY`` seconds, and left
with the cell's last counts when it ends (``interrupted`` first when it was). A short cell, or one that gives the
cluster nothing, shows nothing. The package's own cells (``%%gpurun``, ``%gpucluster``...) show their own lines.

The line is a display in the cell, updated in place: it is shown and redrawn from the cell monitor's timer thread
in a copy of the cell's own context (so the front end puts it under this cell, as the cell's own ``display``
would), and left as it ends from the cell itself (IPython's ``post_run_cell``). Nothing here changes what the cell
computes, prints or returns.
"""

from __future__ import annotations

import contextlib
import contextvars
import html
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from IPython.core.interactiveshell import InteractiveShell

if TYPE_CHECKING:
    from distributed import Client
    from IPython.display import DisplayHandle

    from gpu_magics.gpurun.live.progress import Progress

_KEY = "_gpu_magics_plain_progress"
OWN_MAGICS = ("%gpu", "%%gpu")  # cells of the package's own magics show their own lines


class ProgressLine:
    """The line under a plain cell: its progress, as HTML (muted, as the panel's) and text."""

    def __init__(self, text: str) -> None:
        self.text = text

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, str]:
        from gpu_magics.display.format import MUTED

        line = html.escape(self.text)
        return {"text/plain": self.text, "text/html": f"<div class='gpu-magics-progress' style='{MUTED}'>{line}</div>"}


class _Watch:
    """One plain cell watched: its counts, its line once shown, and whether it ended."""

    def __init__(self, client: Client, context: contextvars.Context) -> None:
        from gpu_magics.gpurun.live.progress import Progress

        self.progress: Progress = Progress(client, poll=False)
        self.context = context
        self.handle: DisplayHandle | None = None
        self.ended = False
        self._lock = threading.Lock()

    def begin(self) -> None:
        """Read the counts as the cell begins: at once where the scheduler runs here, else on the timer thread
        (the cell does not wait for a message); the first look is due after ``QUIET_FOR`` seconds."""
        from gpu_magics.gpurun.live.cell_monitor import later
        from gpu_magics.gpurun.live.progress import QUIET_FOR
        from gpu_magics.gpurun.timing import task_count

        assert self.progress.client is not None
        now = task_count.progress_in_place(self.progress.client)
        if now is not None:
            self.progress.start(now)
        else:
            later.call(0.0, self.progress.start)
        later.call(QUIET_FOR, self.look)

    def look(self) -> None:
        """On the timer thread: read the counts and show or redraw the line, then look again later."""
        from gpu_magics.gpurun.live.cell_monitor import later
        from gpu_magics.gpurun.live.progress import POLL_EVERY

        if self.ended:
            return
        self.progress.refresh()
        state = self.progress.state()
        with self._lock:
            if self.ended:
                return
            if state.total:  # the cluster was given tasks since the cell began
                self.context.run(self._show, ProgressLine(state.text()))
        later.call(POLL_EVERY, self.look)

    def _show(self, line: ProgressLine) -> None:
        if self.handle is None:
            from IPython.display import display

            self.handle = display(line, display_id=True)
        else:
            self.handle.update(line)

    def end(self, error: object) -> None:
        """In the cell, as it ends: no more looks; a line shown is left with the last counts."""
        with self._lock:
            self.ended = True
        self.progress.stop()
        if self.handle is None:
            return
        client = self.progress.client
        if client is not None and client.status == "running":  # a lost cluster's line keeps the counts it had
            self.progress.refresh()
        text = self.progress.state().text()
        if isinstance(error, KeyboardInterrupt):
            text = f"interrupted · {text}"
        elif error is not None:
            text = f"failed · {text}"
        self.handle.update(ProgressLine(text))


class PlainProgress:
    """The shell's plain cells watched (IPython's ``pre_run_cell`` and ``post_run_cell``)."""

    def __init__(self, shell: InteractiveShell, elsewhere: Callable[[], bool]) -> None:
        self.shell = shell
        self.elsewhere = elsewhere  # whether plain cells show their own progress now (SPMD cells: their table)
        self.watch: _Watch | None = None

    def before_cell(self, info: Any) -> None:
        self.after_cell(None)  # a cell whose end never came (an interrupt in another hook): ended now
        client = self._cluster_client(str(getattr(info, "raw_cell", "") or ""))
        if client is not None:
            self.watch = _Watch(client, contextvars.copy_context())
            self.watch.begin()

    def after_cell(self, result: Any) -> None:
        watch, self.watch = self.watch, None
        if watch is not None:
            watch.end(getattr(result, "error_in_exec", None))

    def _cluster_client(self, raw_cell: str) -> Client | None:
        """The client of the cluster in use where this cell is watched, else ``None``."""
        from gpu_magics.display.live import can_show_widgets

        if not can_show_widgets(self.shell) or raw_cell.lstrip().startswith(OWN_MAGICS):
            return None
        if self.elsewhere():
            return None
        from gpu_magics.cluster.control import queries

        client = queries.active_client()
        return client if client is not None and client.status == "running" else None


def install(shell: InteractiveShell, elsewhere: Callable[[], bool] = lambda: False) -> None:
    """Watch the shell's plain cells (at ``%load_ext``); not while ``elsewhere()`` says they show their own
    progress."""
    if isinstance(getattr(shell, _KEY, None), PlainProgress):
        return
    made = PlainProgress(shell, elsewhere)
    setattr(shell, _KEY, made)
    shell.events.register("pre_run_cell", made.before_cell)
    shell.events.register("post_run_cell", made.after_cell)


def uninstall(shell: InteractiveShell) -> None:
    """Stop watching (``%unload_ext``); a cell being watched ends its line."""
    made = getattr(shell, _KEY, None)
    if not isinstance(made, PlainProgress):
        return
    made.after_cell(None)
    for event, callback in (("pre_run_cell", made.before_cell), ("post_run_cell", made.after_cell)):
        with contextlib.suppress(ValueError):  # the user took it away
            shell.events.unregister(event, callback)
    delattr(shell, _KEY)
