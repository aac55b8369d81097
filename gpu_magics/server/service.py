"""``MonitorService``: the one sampler the server shares among all its clients.

The sampler's threads make every NVML call, so nothing here blocks the event loop. Snapshots reach listeners on
the IOLoop (the sampler thread hops over with ``add_callback``). The sampler starts on first use and stops
after ``idle_timeout`` seconds with no listener and no request (its standby); the first request after a standby
gets a fresh reading, not the last one before it.
"""

from __future__ import annotations

import asyncio
import atexit
import logging
import os
import time
import weakref
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from tornado.ioloop import IOLoop

from gpu_magics.monitor.models import GpuSource, HostReading, Snapshot
from gpu_magics.monitor.sampler import MIN_INTERVAL, Sampler
from gpu_magics.monitor.sources import make_source, source_from_env
from gpu_magics.server.config import GpuMagicsServer
from gpu_magics.text.units import format_age

_log = logging.getLogger(__name__)
_live: weakref.WeakSet[MonitorService] = weakref.WeakSet()
_atexit_registered = False

STARTING_STATUS = "starting: the first GPU read is under way"
FIRST_READ_WAIT = 0.3  # seconds a request waits for the first read before it gets the placeholder
STANDBY_READ_WAIT = 10.0  # seconds a request after a standby waits for a fresh read before it gets the old one
STALE_STATUS = "stale"  # a status "stale: read 17 min ago, ...": the old snapshot, when no fresh one came in time

Listener = Callable[[Snapshot], None]
SourceFactory = Callable[[GpuMagicsServer], GpuSource]


def default_source_factory(config: GpuMagicsServer) -> GpuSource:
    """The source ``config.source`` names; making it does no NVML work (that waits for the first read)."""
    if config.source == "fake":
        choice = source_from_env()
        if choice.spec is not None:  # $GPU_MAGICS_SOURCE=fake:spec.json: the same GPUs the kernels see
            return make_source("fake", spec=choice.spec)
        return make_source("fake", gpus=config.fake_gpus)
    return make_source("nvml")


class MonitorService:
    """Owns the shared ``Sampler``; tells listeners (websockets) of each snapshot on the IOLoop."""

    def __init__(
        self,
        config: GpuMagicsServer,
        *,
        source_factory: SourceFactory = default_source_factory,
        idle_timeout: float = 60.0,
    ) -> None:
        self.config = config
        self._source_factory = source_factory
        self._idle_timeout = idle_timeout
        self._sampler: Sampler | None = None
        self._unsubscribe: Callable[[], None] | None = None
        self._loop: IOLoop | None = None
        self._listeners: dict[int, tuple[Listener, float | None]] = {}
        self._next_id = 0
        self._last_used = time.monotonic()
        self._started_at = time.time()  # when the sampler last started: the time of a placeholder snapshot
        self._idle_handle: object | None = None
        self._resumed = False  # restarted after a standby, and no fresh reading yet
        self._refreshing: asyncio.Future[Snapshot] | None = None
        self._closed = False
        self._on_close: list[Callable[[], None]] = []
        _track(self)

    # -- lifecycle -------------------------------------------------------------------------------------

    @property
    def sample_interval(self) -> float:
        """Seconds between the shared sampler's snapshots."""
        return self._sampler.interval if self._sampler is not None else self._wanted_interval()

    @property
    def running(self) -> bool:
        return self._sampler is not None and self._sampler.running

    def ensure_started(self) -> Sampler:
        """The shared sampler, started (call on the IOLoop)."""
        if self._closed:
            raise RuntimeError("the GPU monitor service is closed")
        self._last_used = time.monotonic()
        if self._sampler is None:
            self._sampler = Sampler(
                self._source_factory(self.config),
                interval=self._wanted_interval(),
                slow_interval=max(MIN_INTERVAL, self.config.slow_interval),
                history=self.config.history,
            )
        if not self._sampler.running:
            self._loop = IOLoop.current()
            if self._unsubscribe is None:
                self._unsubscribe = self._sampler.subscribe(self._from_sampler_thread)
            self._started_at = time.time()
            self._resumed = self._sampler.latest() is not None  # its newest snapshot is as old as the standby
            self._sampler.start()
            self._schedule_idle_check()
        return self._sampler

    def on_close(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` when the service closes (what reads its sampler stops with it)."""
        self._on_close.append(callback)

    def close(self) -> None:
        """Stop sampling and release the source (server shutdown)."""
        self._closed = True
        callbacks, self._on_close = self._on_close, []
        _call_each([(callback, ()) for callback in callbacks], "closing what reads the GPU monitor failed")
        self._listeners.clear()
        self._cancel_idle_check()
        sampler, self._sampler = self._sampler, None
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None
        if sampler is not None:
            sampler.close()

    # -- data ------------------------------------------------------------------------------------------

    async def latest(self) -> Snapshot:
        """The newest snapshot; the first call waits for one (read on a worker thread), and so does the first
        after a standby."""
        sampler = self.ensure_started()
        if self._resumed:
            return await self._after_standby(sampler)
        snapshot = sampler.latest()
        if snapshot is None:
            snapshot = await asyncio.get_running_loop().run_in_executor(None, sampler.tick)
        return snapshot

    async def current(self, wait: float = FIRST_READ_WAIT) -> Snapshot:
        """The newest snapshot, after at most ``wait`` seconds: if the first read has not finished by then (a slow
        NVML takes seconds), a placeholder with no GPU and ``STARTING_STATUS``; listeners get the first real
        snapshot when it comes. After a standby it waits for a fresh reading (``_after_standby``)."""
        sampler = self.ensure_started()
        if self._resumed:
            return await self._after_standby(sampler)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait
        while (snapshot := sampler.latest()) is None and loop.time() < deadline:
            await asyncio.sleep(0.01)
        return snapshot if snapshot is not None else self.starting_snapshot()

    async def newest(self) -> Snapshot | None:
        """The newest snapshot without waiting for a first one (``None`` before it); after a standby, a fresh one."""
        sampler = self.ensure_started()
        return await self._after_standby(sampler) if self._resumed else sampler.latest()

    async def _after_standby(self, sampler: Sampler) -> Snapshot:
        """A reading taken now, slow fields (processes) included, on a worker thread: the sampler has just resumed
        and its newest snapshot is from before its standby. Requests meanwhile wait for the same reading; when it
        takes longer than ``STANDBY_READ_WAIT``, they get the old snapshot, its status saying how old it is."""
        if self._refreshing is None:
            self._refreshing = asyncio.ensure_future(asyncio.get_running_loop().run_in_executor(None, sampler.refresh))
            self._refreshing.add_done_callback(self._refreshed)
        try:
            return await asyncio.wait_for(asyncio.shield(self._refreshing), STANDBY_READ_WAIT)
        except TimeoutError:
            old = sampler.latest() or self.starting_snapshot()
            if old.time >= self._started_at:
                return old
            when = format_age(old.time, time.time())
            status = f"{STALE_STATUS}: read {when} ago, before the monitor paused (no one watched); a new read is late"
            return replace(old, status=status)

    def _refreshed(self, future: asyncio.Future[Snapshot]) -> None:
        if self._refreshing is future:
            self._refreshing = None
            self._resumed = False

    def starting_snapshot(self) -> Snapshot:
        """The placeholder: no GPU, no host reading, dated when the sampler started (before any real one)."""
        host = HostReading(cpu_percent=None, memory_used=None, memory_total=None, cpu_count=os.cpu_count() or 1)
        return Snapshot(time=self._started_at, gpus=(), host=host, status=STARTING_STATUS)

    def history(self, since: float | None = None, limit: int | None = None) -> list[Snapshot]:
        """Buffered snapshots after ``since`` (oldest first), at most the newest ``limit``."""
        snapshots = self.ensure_started().history(since)
        if limit is not None:
            snapshots = snapshots[-limit:] if limit > 0 else []
        return snapshots

    # -- listeners -------------------------------------------------------------------------------------

    def add_listener(self, listener: Listener, interval: float | None = None) -> Subscription:
        """Call ``listener`` on the IOLoop with each snapshot until the returned subscription is removed.

        ``interval`` (seconds) is how often this listener wants data: the sampler runs at the fastest interval
        any listener asks for, never slower than ``config.interval`` nor faster than 0.1 s.
        """
        key = self._next_id
        self._next_id += 1
        self._listeners[key] = (listener, interval)
        self.ensure_started()
        self._apply_interval()
        return Subscription(self, key)

    def _set_interval(self, key: int, interval: float | None) -> None:
        if key in self._listeners:
            self._listeners[key] = (self._listeners[key][0], interval)
            self._apply_interval()

    def _remove(self, key: int) -> None:
        if self._listeners.pop(key, None) is not None:
            self._last_used = time.monotonic()
            self._apply_interval()

    def _wanted_interval(self) -> float:
        wanted = [interval for _, interval in self._listeners.values() if interval is not None]
        return max(MIN_INTERVAL, min([self.config.interval, *wanted]))

    def _apply_interval(self) -> None:
        if self._sampler is not None:
            interval = self._wanted_interval()
            if abs(self._sampler.interval - interval) > 1e-9:
                self._sampler.interval = interval

    def _from_sampler_thread(self, snapshot: Snapshot) -> None:
        loop = self._loop
        if loop is not None and not self._closed:
            loop.add_callback(self._dispatch, snapshot)

    def _dispatch(self, snapshot: Snapshot) -> None:
        _call_each(
            [(listener, (snapshot,)) for listener, _ in list(self._listeners.values())], "GPU snapshot listener failed"
        )

    # -- idle stop -------------------------------------------------------------------------------------

    def _schedule_idle_check(self) -> None:
        if self._idle_handle is None and self._loop is not None and self._idle_timeout > 0:
            self._idle_handle = self._loop.call_later(self._idle_timeout, self._idle_check)

    def _cancel_idle_check(self) -> None:
        if self._idle_handle is not None and self._loop is not None:
            self._loop.remove_timeout(self._idle_handle)
        self._idle_handle = None

    def _idle_check(self) -> None:
        self._idle_handle = None
        if self._closed or self._sampler is None:
            return
        idle_for = time.monotonic() - self._last_used
        if not self._listeners and idle_for >= self._idle_timeout:
            _log.debug("GPU sampler idle for %.0f s: stopping it", idle_for)
            self._sampler.stop()
            return
        self._schedule_idle_check()


class Subscription:
    """A listener added with ``MonitorService.add_listener``."""

    def __init__(self, service: MonitorService, key: int) -> None:
        self._service = service
        self._key = key

    def set_interval(self, interval: float | None) -> None:
        """Ask for data every ``interval`` seconds (``None``: the server's interval)."""
        self._service._set_interval(self._key, interval)

    def remove(self) -> None:
        self._service._remove(self._key)


def _track(service: MonitorService) -> None:
    global _atexit_registered
    _live.add(service)
    if not _atexit_registered:
        atexit.register(close_all)
        _atexit_registered = True


def close_all() -> None:
    """Close every service of this process (at exit; tests call it after each server)."""
    for service in list(_live):
        service.close()


def _call_each(calls: list[tuple[Callable[..., None], tuple[Any, ...]]], failed: str) -> None:
    """Make each call, whatever the one before raised (logged as ``failed``)."""
    for function, args in calls:
        try:
            function(*args)
        except Exception:  # a listener or a closing callback never stops the others, whatever it raised
            _log.exception(failed)
