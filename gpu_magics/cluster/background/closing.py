"""Closing a cluster whose workers may be slow to end (a restart or scale under way: workers still in their start
cannot be asked to close, and their nannies wait before they end them): the close goes on in a thread, and the
stop answers once it ended or after a short wait, whichever comes first."""

from __future__ import annotations

import threading
from collections.abc import Callable

from gpu_magics.text.units import dropped


class Closing:
    """A close under way in its own thread; ``finished`` is set once it ended (a new start waits for it)."""

    def __init__(
        self,
        close: Callable[[], str],
        failed: Callable[[BaseException], str],
        *,
        here: bool,
        then: Callable[[Closing], None] | None = None,
    ) -> None:
        """``here``: close in this thread (nothing slow is expected), returning once it ended; ``then`` is called
        with this once it ended (before ``finished`` is set)."""
        self.finished = threading.Event()
        self.said: str | None = None
        self._close, self._failed, self._then = close, failed, then
        if here:
            self._run()
        else:
            threading.Thread(target=self._run, name="gpu-magics-close", daemon=True).start()

    def _run(self) -> None:
        try:
            self.said = self._close()
        except Exception as error:  # the close's failure, of any kind, is the stop's line
            dropped("closing the cluster", error)
            self.said = self._failed(error)
        finally:
            try:
                if self._then is not None:
                    self._then(self)
            finally:
                self.finished.set()

    def line(self, wait_s: float) -> str | None:
        """What the close said, once it ended within ``wait_s`` seconds; ``None`` while it goes on."""
        return self.said if self.finished.wait(wait_s) else None
