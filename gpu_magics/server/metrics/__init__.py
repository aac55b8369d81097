"""In the Jupyter server process: GPU use per GPU, kernel and cluster on jupyter_server's own Prometheus endpoint.

``install`` registers one collector in prometheus_client's default registry (the one jupyter_server's ``/metrics``
serves, behind ``ServerApp.authenticate_prometheus``); no handler of its own. A scrape answers from the last
refresh (``feed``): the records, NVML's process lists and the sampler's readings are read off the scrape, every
``GpuMagicsServer.metrics_interval`` seconds while scrapes come (or the side panel asks, ``api/idle-hold``: what
each kernel holds on GPUs that sit idle; with ``GpuMagicsServer.idle_reclaim_min`` on, always, for the reclaim).
"""

from __future__ import annotations

from typing import Any

__all__ = ["install"]


def install(serverapp: Any, service: Any, leftovers: Any = None) -> None:
    """Refresh the figures from ``service``'s sampler (and ``leftovers``, the registry of the kernels' processes)
    for ``api/idle-hold``, and serve them on ``/metrics`` unless ``GpuMagicsServer.metrics`` is off."""
    from tornado.ioloop import IOLoop

    from gpu_magics.server.metrics.collector import attach
    from gpu_magics.server.metrics.feed import FEED_KEY, MetricsFeed
    from gpu_magics.server.reclaim.reclaimer import IdleReclaim

    after_min = float(service.config.idle_reclaim_min)
    park = bool(service.config.idle_reclaim_park)
    reclaim = IdleReclaim(serverapp.kernel_manager, after_min, serverapp.log, park=park) if after_min > 0 else None
    feed = MetricsFeed(
        service,
        kernel_manager=serverapp.kernel_manager,
        session_manager=serverapp.session_manager,
        leftovers=None if leftovers is None else leftovers.leftovers,
        reclaim=reclaim,
    )
    serverapp.web_app.settings[FEED_KEY] = feed
    if service.config.metrics:
        attach(feed)
    service.on_close(feed.close)
    if reclaim is not None:  # it watches from the start, scraped or not
        IOLoop.current().add_callback(feed.start)
