"""A display publisher that records what a shell shows, for tests of outputs that update in place."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from IPython.core.displaypub import DisplayPublisher
from IPython.core.interactiveshell import InteractiveShell


@dataclass
class Message:
    data: dict[str, Any]
    display_id: str | None
    update: bool


@dataclass
class Recorder(DisplayPublisher):
    """Every display and display update, in order (from any thread)."""

    messages: list[Message] = field(default_factory=list)

    def __post_init__(self) -> None:
        super().__init__()
        self._lock = threading.Lock()

    def publish(self, data: Any, metadata: Any = None, source: Any = None, **kwargs: Any) -> None:
        transient = kwargs.get("transient") or {}
        with self._lock:
            self.messages.append(Message(dict(data), transient.get("display_id"), bool(kwargs.get("update"))))

    def outputs(self) -> dict[str, dict[str, Any]]:
        """What each output shows at the end: display id (or a position for outputs without one) -> its data."""
        final: dict[str, dict[str, Any]] = {}
        for position, message in enumerate(self.messages):
            final[message.display_id or f"#{position}"] = message.data
        return final


@contextlib.contextmanager
def recording(shell: InteractiveShell, kernel: bool = True) -> Iterator[Recorder]:
    """Record the shell's displays; ``kernel``: pretend a front end that redraws outputs in place."""
    recorder, previous = Recorder(), shell.display_pub
    formatter = shell.display_formatter
    types = list(formatter.active_types)
    shell.display_pub = recorder
    had_kernel = hasattr(shell, "kernel")
    if kernel and not had_kernel:
        shell.kernel = object()
        formatter.active_types = ["text/plain", "text/html"]  # as a kernel's front end asks for
    try:
        yield recorder
    finally:
        shell.display_pub = previous
        formatter.active_types = types
        if kernel and not had_kernel:
            del shell.kernel


def final_frames(outputs: list[Any]) -> list[str]:
    """The text of each output ``capture_output`` recorded, as the cell left it: an output updated in place (a live
    table, progress bars) by its last frame, in the place of its first."""
    last: dict[str, str] = {}
    for position, output in enumerate(outputs):
        last[output.transient.get("display_id") or f"#{position}"] = output.data.get("text/plain", "")
    return list(last.values())


def shown_text(content: dict[str, Any]) -> str:
    """The text of a kernel's display message (``display_data``, ``update_display_data``, ``execute_result``), on
    lines of its own (as the notebook shows it, apart from what is printed next)."""
    text = str(content["data"].get("text/plain", ""))
    return text if not text or text.endswith("\n") else text + "\n"


@dataclass
class CellOutput:
    """What a cell printed or showed, from its kernel's output messages taken in order (``take``): an output
    updated in place (a live table, a line that ends as the cluster) as it was left, its last frame where its first
    one was. An update of an output this cell did not show is not the cell's."""

    parts: list[str] = field(default_factory=list)
    places: dict[str, int] = field(default_factory=dict)  # display id -> its place in parts

    def take(self, message: dict[str, Any]) -> None:
        kind, content = message["msg_type"], message["content"]
        display_id = (content.get("transient") or {}).get("display_id")
        if kind == "stream":
            self.parts.append(content["text"])
        elif kind == "update_display_data":
            if display_id in self.places:
                self.parts[self.places[display_id]] = shown_text(content)
        elif kind in ("execute_result", "display_data"):
            if display_id is not None:
                self.places[display_id] = len(self.parts)
            self.parts.append(shown_text(content))
        elif kind == "error":
            self.parts.append("\n".join(content["traceback"]))

    @property
    def text(self) -> str:
        return "".join(self.parts)
