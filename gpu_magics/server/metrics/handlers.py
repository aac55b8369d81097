"""``GET api/idle-hold``: what each running kernel holds on GPUs that sit idle, and, once that has lasted
``GpuMagicsServer.idle_hold_warning_min``, one line with the actions that give it back (types.ts mirrors it)."""

from __future__ import annotations

import time

from jupyter_server.auth.decorator import authorized
from tornado import web

from gpu_magics.server.handlers import GpuMagicsHandler
from gpu_magics.server.metrics.feed import FEED_KEY, MetricsFeed
from gpu_magics.server.ownership.kernels import running_kernel_ids


class IdleHoldHandler(GpuMagicsHandler):
    """``GET idle-hold``: what each running kernel holds on idle GPUs, since when, and the line the side panel shows.
    Asking keeps the figures refreshing, as a scrape does; the first answer may come before the first refresh."""

    @web.authenticated
    @authorized
    async def get(self) -> None:
        feed: MetricsFeed = self.settings[FEED_KEY]
        frame = feed.scraped()
        running = running_kernel_ids(self.kernel_manager)
        now = time.time()
        warning_min = float(self.service.config.idle_hold_warning_min)
        kernels = [hold.to_json(now, warning_min * 60) for hold in frame.holds if hold.kernel_id in running]
        self.reply({"time": frame.time or None, "warning_min": warning_min, "kernels": kernels})
