"""What a running SPMD cell shows besides its ranks' merged lines: its one status table, the ranks' live progress
bars, the lines ``--output`` folds away, the framework noise sent to the kernel's log instead, and the line that
names a package the ranks lack. Runs in the kernel's main thread, from ``cell``."""

from __future__ import annotations

import contextlib
import re
import sys
import time
from collections.abc import Mapping
from typing import Any

from gpu_magics.spmd.kernel.view.output import Shown, progress_lines
from gpu_magics.spmd.kernel.view.results import ProgressView, StatusView

PROGRESS_S = 0.2  # seconds between two updates of the live progress bars


class Board:
    """The cell's one status table (the group made for it is a line in it), shown and updated in place."""

    def __init__(self, quiet: bool, shown: tuple[int, ...] | None = None) -> None:
        self.quiet, self.shown = quiet, shown  # shown: the ranks whose lines show live (--output), None: all
        self.notes: list[str] = []
        self.began = time.perf_counter()
        self._handle: Any = None

    def show(self, view: StatusView) -> None:
        if self.quiet:
            return
        if self._handle is None:
            self._handle = display(view)
        else:
            self._handle.update(view)


class Bars:
    """The ranks' progress bars (lines redrawn after a carriage return): one display, updated at most every
    ``PROGRESS_S``. A bar whose line ended stays in it, in its rank's place, as it looked last; the display
    keeps the bars' last states when the cell ends."""

    def __init__(self, shown: tuple[int, ...] | None = None) -> None:
        self.shown = shown
        self.live: dict[int, dict[str, str]] = {}
        self.finished: dict[int, list[str]] = {}
        self._taken: set[tuple[int, int]] = set()  # (rank, sequence number) of the finished bars taken
        self._answered: set[int] = set()  # ranks whose reply came: a later progress event is an old one
        self._shown: list[str] = []
        self._handle: Any = None
        self._at = 0.0

    def update(self, rank: int, progress: dict[str, str]) -> None:
        if (self.shown is None or rank in self.shown) and rank not in self._answered:
            self.live.setdefault(rank, {}).update(progress)

    def answered(self, rank: int) -> None:
        """``rank``'s reply came (with all its lines): progress events still on their way are older."""
        self._answered.add(rank)

    def finish(self, rank: int, seq: int, text: str) -> bool:
        """A bar of ``rank`` ended as ``text`` (its line's ``seq``, taken once); ``False`` where its rank's lines
        do not show live (``--output``): the line goes with the rank's other lines."""
        if self.shown is not None and rank not in self.shown:
            return False
        if (rank, seq) not in self._taken:  # the live state that came before it was this bar's (or an older one's)
            self._taken.add((rank, seq))
            self.finished.setdefault(rank, []).append(text)
            self.live.pop(rank, None)
        return True

    def show(self, now: float, force: bool = False) -> None:
        lines = progress_lines(self.live, self.finished)
        if lines == self._shown or (now - self._at < PROGRESS_S and not force):
            return
        self._at, self._shown = now, lines
        if self._handle is None:
            self._handle = display(ProgressView(lines))
        else:
            self._handle.update(ProgressView(lines))

    def end(self) -> None:
        """The cell ended: the bars as they stand, kept in the output (a saved notebook shows them)."""
        self.show(time.perf_counter(), force=True)


def log_noise(noise: list[tuple[int, str]]) -> None:
    """Framework lines left out of the cell go to this kernel's log file (never raises)."""
    if not noise:
        return
    with contextlib.suppress(OSError, ValueError):  # the log file unwritable, or text it cannot take
        from gpu_magics.cluster.background.start_logs import log_path

        stamp = time.strftime("%Y-%m-%d %H:%M:%S")
        with log_path().open("a", encoding="utf-8") as file:
            file.writelines(f"{stamp} gpu_magics.spmd rank {rank}: {text}\n" for rank, text in noise)


def print_lines(shown: list[Shown]) -> None:
    """Print ``shown`` in order; each stream is flushed before the other is written (Jupyter keeps the order
    of what arrives) and at the end (the lines show now, not at the stream's next flush)."""
    last = None
    for line in shown:
        stream = sys.stderr if line.stream == "err" else sys.stdout
        if last is not None and stream is not last:
            last.flush()
        print(line.text, file=stream)
        last = stream
    if last is not None:
        last.flush()


def display(view: Any) -> Any:
    from IPython.display import display as show

    return show(view, display_id=True)


def missing_module(error: Mapping[str, Any]) -> str | None:
    """The module a rank's ``ModuleNotFoundError`` names (``None`` for any other error)."""
    if error.get("type") != "ModuleNotFoundError":
        return None
    found = re.match(r"No module named '([\w.]+)'", str(error.get("message", "")))
    return found.group(1) if found else None


# The training libraries gpu-magics' spmd extra installs: a rank that lacks one is told the documented command.
SPMD_EXTRA = ("torch", "accelerate", "lightning", "deepspeed")


def missing_line(module: str, where: str) -> str:
    """``accelerate is not installed where ranks 0,1 run: pip install 'gpu-magics[spmd]' in the workers'
    environment``."""
    package = module.split(".")[0]
    command = "'gpu-magics[spmd]'" if package in SPMD_EXTRA else package
    return (
        f"{package} is not installed where {where} run{'s' * where.startswith('rank ')}: pip install {command} in "
        "the workers' environment (the ranks import there, not in this kernel)"
    )
