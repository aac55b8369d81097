"""``MetricsFeed``: refreshes the ``/metrics`` figures on the server's event loop while scrapes come (or the side
panel asks ``api/idle-hold``).

The first ask starts it (loading the extension does no GPU work); it reads every ``metrics_interval`` seconds
(records and ``/proc`` on a worker thread, the sampler's readings from memory) and stops when nothing has asked for
``STANDBY_S`` seconds, after which the shared sampler stops as it does without listeners. With
``GpuMagicsServer.idle_reclaim_min`` on, it refreshes from the server's start and never stops: after each refresh the
reclaim (``server.reclaim``) asks the kernels whose GPU memory has sat idle that long to give it back.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from functools import partial
from typing import Any

from prometheus_client.core import Metric

from gpu_magics.monitor.models import Snapshot
from gpu_magics.server.leftovers.registry import Leftover
from gpu_magics.server.metrics.collector import detach
from gpu_magics.server.metrics.frame import Frame, build
from gpu_magics.server.metrics.gather import Inputs, gather
from gpu_magics.server.metrics.idle import IdleHold
from gpu_magics.server.metrics.labels import Place
from gpu_magics.server.ownership.kernels import kernel_paths, kernel_pids, running_kernel_ids
from gpu_magics.server.reclaim.reclaimer import IdleReclaim
from gpu_magics.server.service import MonitorService

_log = logging.getLogger(__name__)
STANDBY_S = 600.0  # no scrape (or panel's ask) for this long: stop refreshing (Prometheus scrapes every 15 s to 1 min)
FEED_KEY = "gpu_magics_metrics_feed"


class MetricsFeed:
    """The last frame, and the task that refreshes it."""

    def __init__(
        self,
        service: MonitorService,
        *,
        kernel_manager: Any,
        session_manager: Any,
        leftovers: Callable[[Snapshot | None], list[Leftover]] | None = None,
        reclaim: IdleReclaim | None = None,
    ) -> None:
        self.service = service
        self.config = service.config
        self.frame = Frame(time=0.0)
        self._kernel_manager = kernel_manager
        self._session_manager = session_manager
        self._leftovers = leftovers
        self.reclaim = reclaim
        self._idle = IdleHold()
        self._place: Place | None = None
        self._task: asyncio.Task[None] | None = None
        self._last_scrape = 0.0
        self._last_refresh: float | None = None
        self._failed = False
        self._closed = False

    # -- the scrape's side (in memory only) ----------------------------------------------------------------

    def scraped(self) -> Frame:
        """The last frame; starts refreshing when it is not under way (on the event loop only). A scrape, or the
        side panel asking what is held while idle, calls it."""
        self._last_scrape = time.monotonic()
        self.start()
        return self.frame

    def start(self) -> None:
        """Refresh from now on, unless it is under way (on the event loop only; elsewhere this does nothing)."""
        if not self._closed and (self._task is None or self._task.done()):
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:  # not on the server's loop: answer without starting anything
                return
            self._task = loop.create_task(self._run())

    def running_kernels(self) -> set[str]:
        return running_kernel_ids(self._kernel_manager)

    def counters(self) -> list[Metric]:
        """The counters beside the frame's gauges (what the reclaim did), as of now."""
        return [] if self.reclaim is None else list(self.reclaim.families(self._place))

    # -- refreshing ----------------------------------------------------------------------------------------

    async def _run(self) -> None:
        while not self._closed and (
            self.reclaim is not None or time.monotonic() - self._last_scrape < max(STANDBY_S, 3 * self.interval)
        ):
            await self.refresh()
            await asyncio.sleep(self.interval)

    @property
    def interval(self) -> float:
        return float(self.config.metrics_interval)

    async def refresh(self) -> None:
        """Read once and replace the frame; a failure keeps the last frame and is logged once."""
        try:
            loop = asyncio.get_running_loop()
            sampler = self.service.ensure_started()
            snapshot = sampler.latest() or await self.service.latest()  # the first refresh waits for a reading
            history = sampler.history(self._last_refresh) if self._last_refresh is not None else []
            pids = kernel_pids(self._kernel_manager)
            managed = frozenset(running_kernel_ids(self._kernel_manager))
            paths = await kernel_paths(self._session_manager)
            read = partial(gather, snapshot, history, pids, paths, managed, self._leftovers, self.config.cap())
            self.frame = await loop.run_in_executor(None, self._build, read)
            self._last_refresh = self.frame.time
            self._failed = False
            if self.reclaim is not None:
                self.reclaim.consider(self.frame.holds, running_kernel_ids(self._kernel_manager))
        except Exception:  # a refresh never stops the feed: the last figures stay
            if not self._failed:
                _log.exception("gpu_magics: the /metrics figures could not be read (the last ones are kept)")
            self._failed = True

    def _build(self, read: partial[Inputs]) -> Frame:
        if self._place is None:
            self._place = Place.here()
        return build(
            read(),
            self._place,
            self._idle,
            idle_utilization=float(self.config.idle_utilization),
            notebook_label=bool(self.config.metrics_notebook_label),
        )

    def close(self) -> None:
        """Stop refreshing and leave ``/metrics`` (the server is closing)."""
        self._closed = True
        detach(self)
        if self.reclaim is not None:
            self.reclaim.close()
        task, self._task = self._task, None
        if task is not None and not task.done():
            with contextlib.suppress(RuntimeError):  # its loop has closed already
                task.cancel()
