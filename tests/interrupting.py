"""Ctrl-C for a cell a test runs in this process, pressed once the cell is where the test means to interrupt it (as a
user presses the stop button on seeing it), never after a set time: on a busy machine the cell may not be there yet.
"""

from __future__ import annotations

import _thread
import contextlib
import re
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

BOUND_S = 120.0  # a failure bound only: the interrupt comes anyway then, and the test's assertions say what was missing


@contextlib.contextmanager
def interrupt_when(
    ready: Callable[[], bool], bound_s: float = BOUND_S, pressed: threading.Event | None = None
) -> Iterator[threading.Event]:
    """Run the block (the cell) while a thread presses Ctrl-C in the main thread once ``ready()`` is true; the event
    yielded (``pressed``, where given) is set once it has pressed it. Pressed at most once, never after the block
    ended (a cell that can end by itself before ``ready`` may still take it as it ends)."""
    pressed, done = pressed or threading.Event(), threading.Event()
    lock = threading.Lock()

    def watch() -> None:
        deadline = time.monotonic() + bound_s
        while not done.is_set() and not ready() and time.monotonic() < deadline:
            done.wait(0.05)
        with lock:
            if not done.is_set():
                _thread.interrupt_main()
                pressed.set()

    thread = threading.Thread(target=watch, name="test-ctrl-c", daemon=True)
    thread.start()
    try:
        yield pressed
    finally:
        with lock:
            done.set()
        thread.join()


def ranks_started(marks: Path, count: int) -> Callable[[], bool]:
    """Whether ``count`` ranks have left a mark in ``marks`` (see ``marked``)."""
    return lambda: marks.is_dir() and len(list(marks.iterdir())) >= count


def marked(body: str, marks: Path) -> str:
    """``body`` with a mark left in ``marks`` by each rank as it starts it, on its first line (a simple statement:
    the cell's line numbers stay as they were)."""
    marks.mkdir(parents=True, exist_ok=True)
    first, _, rest = body.partition("\n")
    mark = f"import os as _os, pathlib as _pathlib; _pathlib.Path({str(marks)!r}, _os.environ['RANK']).touch(); "
    return mark + first + "\n" + rest


def shows(captured: Any, pattern: str) -> Callable[[], bool]:
    """Whether an output the cell has shown so far (``capture_output``'s, read while the cell runs) matches."""
    return lambda: any(re.search(pattern, output.data.get("text/plain", "")) for output in list(captured.outputs))
