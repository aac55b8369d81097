"""In the kernel: a cluster start that goes on while cells run (``%gpucluster`` gives the prompt back at once).

A ``Starting`` is the handle of one start: its job runs in a thread of its own, and says how far it got (the
scheduler, workers joining, workers warm); whoever shows a line listens (``listen``), whoever needs the cluster
waits (``wait``, or ``wait_in_use`` for its client only), ``%gpucluster stop`` and the kernel's shutdown cancel it
(``cancel``). A start that failed after its magic returned fails the next cell once (``take_unreported``). An
interrupt of any of these waits is one line (``interrupted``): the start goes on.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from IPython.core.error import UsageError

from gpu_magics.text.errors import ClusterError, StartFailed
from gpu_magics.text.units import dropped, format_duration

Phase = Literal["scheduler", "workers", "ready", "failed", "stopped"]
TICK_S = 0.2  # how often the count of joined workers is read while they start


class StartCancelled(Exception):
    """Raised inside a start's job once ``cancel`` was called: it closes what it made."""


def short_interrupt(line: str) -> KeyboardInterrupt:
    """A ``KeyboardInterrupt`` that the notebook shows as its one ``line``, without frames (the kernel's
    traceback view drops them for an interrupt marked so)."""
    interrupt = KeyboardInterrupt(line)
    interrupt.frames_hidden = True  # type: ignore[attr-defined]
    return interrupt


@dataclass(frozen=True)
class StartProgress:
    """How far a start got, and its one line."""

    prog: str
    name: str
    phase: Phase
    expected: int
    joined: int
    warm: int
    elapsed: float
    error: str | None = None
    workers_word: str = "workers"  # "GPU workers" / "CPU workers": what the line calls them
    verb: str = "starting"  # or "restarting", "scaling": what goes on
    detail: str | None = None  # what the workers still wait for (SLURM: jobs pending, and why)

    @property
    def finished(self) -> bool:
        return self.phase in ("ready", "failed", "stopped")

    def line(self) -> str:
        """``starting 'x': 1 of 4 GPU workers up, 0 warm ...`` and then ``'x': 4 GPU workers ready in 2.1 s``."""
        if self.phase == "failed":
            return str(self.error)
        if self.phase == "stopped":
            return f"{self.prog}: stopped {self.name!r} while it was {self.verb}"
        took = format_duration(self.elapsed)
        if self.phase == "ready":
            done = {"restarting": "restarted ", "scaling": "scaled "}.get(self.verb, "")
            return f"{self.prog}: {done}{self.name!r}: {self.expected} {self.workers_word} ready in {took}"
        if self.phase == "scheduler":
            return f"{self.prog}: {self.verb} {self.name!r}: the scheduler ..."
        waiting = f"; {self.detail}" if self.detail else ""
        up = max(self.joined, self.warm)  # a worker counts as up once it is warm, whichever was heard first
        return (
            f"{self.prog}: {self.verb} {self.name!r}: {up} of {self.expected} {self.workers_word} up, "
            f"{self.warm} warm{waiting} ..."
        )


Listener = Callable[[StartProgress], None]


class Starting:
    """One start of a cluster; its job runs in a thread (``run_in_background``) or here (``run_here``)."""

    def __init__(
        self, prog: str, name: str, expected: int, workers_word: str = "workers", verb: str = "starting"
    ) -> None:
        self.prog, self.name, self.expected, self.verb = prog, name, expected, verb
        self.workers_word = workers_word
        self.began = time.perf_counter()
        self.imports_done = threading.Event()  # what the job imports is imported: cells may import it too
        self.in_use = threading.Event()  # its client is the default one (or the start ended): plain cells use it
        self.finished = threading.Event()
        self.cancelled = threading.Event()
        self.info: Any = None  # the job's result (the status once ready)
        self.manager: Any = None  # what gives the workers (``managers``): a line naming another cluster is refused
        self.error: str | None = None
        self.reported = False
        self._phase: Phase = "scheduler" if verb == "starting" else "workers"
        self._joined = 0
        self._warm = 0
        self._detail: str | None = None
        self._elapsed: float | None = None
        self._count: Callable[[], int] | None = None
        self._listeners: list[Listener] = []
        self._lock = threading.Lock()
        self._last_line = ""
        self._thread: threading.Thread | None = None

    # -- the job's side ---------------------------------------------------------------------------------
    def run_in_background(self, job: Callable[[Starting], Any]) -> None:
        """Run ``job(self)`` in a thread; it ends by returning the result or raising (one line, ``UsageError``)."""
        self._thread = threading.Thread(target=self._run, args=(job,), name="gpu-magics-start", daemon=True)
        self._thread.start()
        threading.Thread(target=self._tick, name="gpu-magics-start-count", daemon=True).start()

    def run_here(self, job: Callable[[Starting], Any]) -> None:
        """Run ``job(self)`` in this thread (a start that cannot go on in the background)."""
        self._run(job)

    def _run(self, job: Callable[[Starting], Any]) -> None:
        try:
            self.info = job(self)
        except StartCancelled:
            self._end("stopped")
        except BaseException as error:  # one line: the job made it so; anything else is said in one line too
            dropped("the start", error)
            self.error = str(error) if isinstance(error, UsageError) else f"{self.prog}: {type(error).__name__}"
            if not isinstance(error, (UsageError, KeyboardInterrupt, SystemExit)):
                self.error += f": {error}"
            self._end("failed")
        else:
            self._end("ready")

    def _end(self, phase: Phase) -> None:
        self.imports_done.set()
        self.in_use.set()
        with self._lock:
            self._phase = phase
            if self._elapsed is None:
                self._elapsed = time.perf_counter() - self.began
        self._notify()  # the line shows the end before anyone waiting goes on
        self.finished.set()

    def counting(self, count: Callable[[], int] | None) -> None:
        """From now on (``None``: no more) the line reads ``count()`` as the number of workers that joined."""
        self._count = count

    def update(
        self,
        *,
        phase: Phase | None = None,
        joined: int | None = None,
        warm: int | None = None,
        detail: str | None = None,
        expected: int | None = None,
    ) -> None:
        """Say how far the job got (``detail``: what the workers still wait for; "" says nothing more;
        ``expected``: how many workers it waits for, once known); listeners hear of it when the line changes."""
        with self._lock:
            if expected is not None:
                self.expected = expected
            if detail is not None:
                self._detail = detail or None
            if phase is not None:
                self._phase = phase
            if joined is not None:
                self._joined = joined
            if warm is not None:
                self._warm = warm
        self._notify()

    def ready_at(self, elapsed: float) -> None:
        """The seconds the line says the start took (the job's own count, from the magic's start)."""
        self._elapsed = elapsed

    def check(self) -> None:
        """Raise ``StartCancelled`` once ``cancel`` was called."""
        if self.cancelled.is_set():
            raise StartCancelled

    def _tick(self) -> None:
        while not self.finished.wait(TICK_S):
            count = self._count
            if count is not None:
                try:
                    joined = count()
                    if joined != self._joined:
                        self.update(joined=joined)
                except Exception as error:  # a count that fails leaves the last one shown
                    dropped("counting the workers that joined", error, once=True)

    # -- everyone else's side ---------------------------------------------------------------------------
    def progress(self) -> StartProgress:
        with self._lock:
            elapsed = self._elapsed if self._elapsed is not None else time.perf_counter() - self.began
            return StartProgress(
                self.prog,
                self.name,
                self._phase,
                self.expected,
                self._joined,
                self._warm,
                elapsed,
                self.error,
                self.workers_word,
                self.verb,
                self._detail,
            )

    def listen(self, listener: Listener) -> Callable[[], None]:
        """Call ``listener`` with the progress whenever the line changes (from the job's thread); returns what
        stops it."""
        self._listeners.append(listener)

        def remove() -> None:
            with contextlib.suppress(ValueError):
                self._listeners.remove(listener)

        return remove

    def _notify(self) -> None:
        progress = self.progress()
        line = progress.line()
        if line == self._last_line:
            return
        self._last_line = line
        for listener in list(self._listeners):
            try:
                listener(progress)
            except Exception as error:  # a display that fails never stops the start
                dropped("showing a start's progress", error)

    def wait(self, timeout: float | None = None) -> Any:
        """The job's result once it ends; its failure as one ``UsageError`` line (said: ``reported``);
        ``TimeoutError`` after ``timeout`` seconds; an interrupt as one line (``interrupted``)."""
        try:
            ended = self.finished.wait(timeout)
        except KeyboardInterrupt:
            raise self.interrupted() from None
        if not ended:
            raise TimeoutError(f"the cluster did not start within {timeout:g} s")
        if self._phase == "failed":
            self.reported = True
            raise StartFailed(str(self.error))
        if self._phase == "stopped":
            raise ClusterError(f"{self.prog}: {self.name!r} was stopped while it was {self.verb}")
        return self.info

    def wait_in_use(self) -> None:
        """Return once the cluster's client is the default one (its workers may still start); a start that ended
        first ends this as ``wait`` does; an interrupt as one line (``interrupted``)."""
        try:
            self.in_use.wait()
        except KeyboardInterrupt:
            raise self.interrupted() from None
        if self.finished.is_set() and self._phase != "ready":
            self.wait()

    def interrupted(self) -> KeyboardInterrupt:
        """What an interrupt of a wait for this start raises: it goes on, and how to see or end it."""
        return short_interrupt(
            f"{self.prog}: {self.name!r} goes on {self.verb} in the background; {self.prog} status shows how far "
            f"it got, {self.prog} stop ends it"
        )

    def cancel(self, timeout: float) -> bool:
        """Have the job close what it made and end; ``False`` when it did not end within ``timeout`` s."""
        self.cancelled.set()
        if self._thread is None or self._thread is threading.current_thread():
            return True
        self._thread.join(timeout)
        return not self._thread.is_alive()

    @property
    def unreported(self) -> bool:
        """Whether it failed and no cell said so yet."""
        return self._phase == "failed" and not self.reported

    def take_unreported(self) -> str | None:
        """The failure's line if no cell said it yet (then it counts as said), else ``None``."""
        if not self.unreported:
            return None
        self.reported = True
        return self.error
