"""In the kernel: the cluster's GPU reports as the feed the live panel and the cell monitor read
(``TelemetryFeed``, the ``Sampler`` methods they use), and asking every worker to report now (``ask_for_reports``,
through the worker plugin's ``report_now``)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Protocol

from gpu_magics.cluster.telemetry.plugin import report_now
from gpu_magics.monitor.models import Snapshot


class Reports(Protocol):
    """What the feed asks of the collector (``collector.ClusterTelemetry``)."""

    interval: float

    def history(self, since: float | None = None) -> list[Snapshot]: ...

    def subscribe(self, callback: Callable[[Snapshot], None]) -> Callable[[], None]: ...

    def watch(self) -> Callable[[], None]: ...

    def wait_reports_after(self, moment: float, timeout: float | None = None) -> bool: ...

    def _emit(self, now: float) -> None: ...


class TelemetryFeed:
    """The cluster's GPU snapshots behind the ``Sampler`` methods that the live panel and the cell monitor
    use (``history``, ``subscribe``, ``latest``, ``tick``, ``start``/``stop``). The workers sample all the
    time; ``start`` .. ``stop`` only makes snapshots of their reports."""

    def __init__(self, telemetry: Reports) -> None:
        self.telemetry = telemetry
        self.interval = telemetry.interval
        self._unwatch: Callable[[], None] | None = None

    @property
    def running(self) -> bool:
        return self._unwatch is not None

    def history(self, since: float | None = None) -> list[Snapshot]:
        return self.telemetry.history(since)

    def subscribe(self, callback: Callable[[Snapshot], None]) -> Callable[[], None]:
        return self.telemetry.subscribe(callback)

    def latest(self) -> Snapshot | None:
        history = self.telemetry.history()
        return history[-1] if history else None

    def tick(self) -> Snapshot:
        """A snapshot of the newest reports now (kept in the history, like a sampler's tick)."""
        now = time.time()
        self.telemetry._emit(now)
        latest = self.latest()
        assert latest is not None
        return latest

    def settle(self, moment: float) -> None:
        """Wait (bounded) for the workers' reports that cover ``moment``, the end of a cell."""
        self.telemetry.wait_reports_after(moment)

    def start(self) -> None:
        """Make snapshots of the workers' reports from now on (they report all the time)."""
        if self._unwatch is None:
            self._unwatch = self.telemetry.watch()

    def stop(self) -> None:
        unwatch, self._unwatch = self._unwatch, None
        if unwatch is not None:
            unwatch()


def ask_for_reports(client: Any) -> bool | None:
    """In the kernel: have every worker send its report now; whether any can (a worker without the plugin
    cannot), or ``None`` when they could not be asked (their reports then come at their interval)."""
    if client is None:
        return None
    try:
        answers = client.run(report_now, on_error="return")
    except (OSError, RuntimeError):  # the scheduler's comm failed or timed out; the client's loop is gone
        return None
    return any(answer is True for answer in answers.values())
