"""In the kernel: closing the cluster in use after a while without a task (``%gpucluster --idle-timeout 30m``).

The scheduler knows best when it last ran a task: distributed keeps ``Scheduler.idle_since`` (set when no task is
queued or processing, cleared by any task transition), checking it every 250 ms. ``IdleWatcher`` asks for it from
a daemon thread, converts it to this kernel's clock, and when the cluster has been idle for the timeout calls
``on_idle`` (which closes a cluster started here, or only detaches from an attached one). Its thread runs in the
context of the cell that started it, so what ``on_idle`` prints goes to that notebook.
"""

from __future__ import annotations

import contextvars
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from gpu_magics.text.units import dropped

if TYPE_CHECKING:
    from distributed import Client

MIN_POLL_S = 0.25
MAX_POLL_S = 5.0


def _scheduler_idle_since(dask_scheduler: Any = None) -> tuple[float | None, float]:
    """``run_on_scheduler`` target: since when the scheduler has run no task (its clock), and its clock now."""
    return getattr(dask_scheduler, "idle_since", None), time.time()


class IdleWatcher:
    """Watches the scheduler of ``client``; calls ``on_idle()`` once, after ``timeout`` seconds without a task.
    ``on_change()`` is called whenever the cluster turns idle or busy (the record shows the time left)."""

    def __init__(
        self,
        client: Client,
        timeout: float,
        on_idle: Callable[[], None],
        on_change: Callable[[], None] | None = None,
    ) -> None:
        self.client = client
        self.timeout = timeout
        self._on_idle = on_idle
        self._on_change = on_change
        self._since: float | None = None
        self._stop = threading.Event()
        self._wake = threading.Event()
        context = contextvars.copy_context()  # the cell's: what on_idle prints goes to its notebook
        self._thread = threading.Thread(target=context.run, args=(self._run,), name="gpu-magics-idle", daemon=True)
        self._thread.start()

    @property
    def idle_since(self) -> float | None:
        """Since when the cluster has run no task (this kernel's clock), or ``None`` while it runs one."""
        return self._since

    def left(self, now: float | None = None) -> float | None:
        """Seconds until the cluster closes if it stays idle; ``None`` while it runs a task."""
        since = self._since
        if since is None:
            return None
        return max(0.0, since + self.timeout - (time.time() if now is None else now))

    def set_timeout(self, timeout: float) -> None:
        """Change the timeout (from now on, counted from when the cluster went idle)."""
        self.timeout = timeout
        self._wake.set()

    def stop(self) -> None:
        """Stop watching (the cluster closes or gets another timeout)."""
        self._stop.set()
        self._wake.set()
        if self._thread is not threading.current_thread():
            self._thread.join(timeout=5)

    def stopped_within(self, seconds: float) -> bool:
        """Wait up to ``seconds`` (from ``on_idle``, on the watch's thread); ``True`` once the watch was stopped."""
        return self._stop.wait(seconds)

    def poll_interval(self) -> float:
        return min(MAX_POLL_S, max(MIN_POLL_S, self.timeout / 10))

    def check(self) -> bool:
        """Ask the scheduler once; ``True`` when the cluster has been idle for the timeout."""
        idle_since, then = self.client.run_on_scheduler(_scheduler_idle_since)
        since = None if idle_since is None else time.time() - max(0.0, then - float(idle_since))
        previous = self._since
        changed = (since is None) != (previous is None) or (
            since is not None and previous is not None and abs(since - previous) > 1.0
        )
        if since is None or changed or previous is None:
            self._since = since
        if changed and self._on_change is not None:
            try:
                self._on_change()
            except Exception as error:  # a listener never stops the idle watch
                dropped("the idle watch's listener", error)
        return self._since is not None and time.time() - self._since >= self.timeout

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                idle = self.check()
            except Exception as error:  # the cluster is closing, or its scheduler went away: nothing to watch
                dropped("the idle watch's check", error, once=True)
                if self.client.status not in ("running", "connecting"):
                    return
                idle = False
            if idle and not self._stop.is_set():
                self._on_idle()
                return
            self._wake.wait(self.poll_interval())
            self._wake.clear()


def closed_line(prog: str, owned: bool, name: str, waited: float, gpus: bool = True) -> str:
    """What the kernel says when the idle timeout closed its cluster (``owned``; ``gpus``: its workers had GPUs)
    or detached from one."""
    from gpu_magics.text.units import format_duration

    if owned:
        freed = "its GPUs are free" if gpus else "its workers have ended"
        return (
            f"{prog}: closed cluster {name!r} after {format_duration(waited)} without a task (--idle-timeout); "
            f"{freed}. {prog} starts a new one"
        )
    return (
        f"{prog}: detached from {name} after {format_duration(waited)} without a task (--idle-timeout); its "
        "scheduler and workers keep running"
    )
