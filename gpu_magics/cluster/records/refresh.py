"""Keeping a cluster's discovery record current: the side panel reads the workers' GPUs from it."""

from __future__ import annotations

import threading
from collections.abc import Callable

from gpu_magics.text.units import dropped


class RecordRefresher:
    """Calls ``write`` every ``every`` seconds, in a daemon thread, whenever ``version()`` has changed since the
    last write; a failing write is retried at the next turn."""

    def __init__(self, write: Callable[[], None], version: Callable[[], int], every: float) -> None:
        self._write = write
        self._version = version
        self._every = every
        self._stop = threading.Event()
        self._written: int | None = None
        self._thread = threading.Thread(target=self._run, name="gpu-magics-record", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self._every):
            version = self._version()
            if version != self._written:
                try:
                    self._write()
                    self._written = version
                except Exception as error:  # a write that fails any way is tried at the next change
                    dropped("refreshing the cluster's record", error, once=True)

    def stop(self) -> None:
        """Stop refreshing (waits briefly for a write under way)."""
        self._stop.set()
        if self._thread is not threading.current_thread():
            self._thread.join(timeout=5)
