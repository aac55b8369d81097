"""The one collector in prometheus_client's default registry, which jupyter_server's ``/metrics`` serves.

A scrape reads the feed's last frame, its counters and the server's list of kernels (all in memory): no NVML call,
no file read.
Registered once per process; a later server of the same process (tests) takes it over with ``attach``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from typing import Any, Protocol

from prometheus_client import REGISTRY
from prometheus_client.core import Metric

from gpu_magics.server.metrics.frame import Frame

_log = logging.getLogger(__name__)


class Feed(Protocol):
    def scraped(self) -> Frame:
        """The last frame (a scrape is under way: keep refreshing)."""
        ...

    def running_kernels(self) -> set[str]:
        """The kernels the server runs now."""
        ...


def counters(feed: Feed) -> list[Metric]:
    """The feed's counters, where it keeps any (``MetricsFeed.counters``: what the idle reclaim did)."""
    found = getattr(feed, "counters", None)
    return list(found()) if callable(found) else []


class GpuMagicsCollector:
    """Yields the ``gpu_magics_*`` families of the attached feed's last frame."""

    def __init__(self) -> None:
        self.feed: Feed | None = None

    def describe(self) -> list[Metric]:
        return []  # registering must not collect (that would start the sampler)

    def collect(self) -> Iterator[Metric]:
        feed = self.feed
        if feed is None:
            return iter(())
        try:
            return iter([*metrics(feed.scraped(), feed.running_kernels(), time.time()), *counters(feed)])
        except Exception:  # /metrics keeps answering with jupyter_server's own series
            _log.exception("gpu_magics: the /metrics figures could not be written")
            return iter(())


def metrics(frame: Frame, running: set[str], now: float) -> list[Metric]:
    """The families of ``frame`` at ``now``: a kernel the server ran at the refresh and no longer runs is left out,
    durations count to ``now``, a label set met twice is kept once."""
    ended = frame.managed - running
    found = []
    for family in frame.families:
        metric = Metric(family.name, family.help, "gauge")
        seen: set[Any] = set()
        for series in family.series:
            if series.kernel_id in ended or series.labels in seen:
                continue
            seen.add(series.labels)
            value = series.value if series.since is None else max(0.0, now - series.since)
            metric.add_sample(family.name, dict(series.labels), value)
        if metric.samples:
            found.append(metric)
    return found


_collector: GpuMagicsCollector | None = None
_lock = threading.Lock()


def attach(feed: Feed) -> GpuMagicsCollector:
    """Serve ``feed`` on ``/metrics`` (registering the collector the first time)."""
    global _collector
    with _lock:
        if _collector is None:
            _collector = GpuMagicsCollector()
            REGISTRY.register(_collector)
        _collector.feed = feed
        return _collector


def detach(feed: Feed) -> None:
    """Stop serving ``feed`` (its server is closing); its series leave ``/metrics``."""
    with _lock:
        if _collector is not None and _collector.feed is feed:
            _collector.feed = None
