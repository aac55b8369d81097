"""The jupyter-server extension: REST and websocket endpoints for the JupyterLab side panel.

Enabled by ``pip install`` (``etc/jupyter/jupyter_server_config.d/gpu_magics.json``). Loading it does no GPU work:
the shared sampler starts on the first request that needs it. Configure it with ``c.GpuMagicsServer.*``
(``interval``, ``history``, ``source``, ``fake_gpus``, ``metrics``...). It adds the ``gpu_magics_*`` series to the
server's own Prometheus endpoint ``/metrics`` (``server.metrics``), and from its start records the processes its
kernels start, to find those that outlive their kernel on the GPUs (``server.leftovers``: ``/proc`` only).
"""

from __future__ import annotations

import os
from typing import Any

__all__ = ["_load_jupyter_server_extension"]


def _load_jupyter_server_extension(serverapp: Any) -> None:
    """Create the shared monitor service and register the handlers with ``serverapp``'s web application."""
    from tornado.ioloop import IOLoop

    from gpu_magics.arrays.caps.cap import SERVER_CAP_ENV
    from gpu_magics.server.config import GpuMagicsServer
    from gpu_magics.server.handlers import SERVICE_KEY
    from gpu_magics.server.leftovers.handlers import WATCH_KEY
    from gpu_magics.server.leftovers.watch import LeftoverWatch
    from gpu_magics.server.metrics import install
    from gpu_magics.server.routes import setup_handlers
    from gpu_magics.server.service import MonitorService

    config = GpuMagicsServer(parent=serverapp)
    given = config.memory_cap
    if given:  # the kernels this server starts inherit its environment: each one limits itself to it
        os.environ[SERVER_CAP_ENV] = given
    else:
        os.environ.pop(SERVER_CAP_ENV, None)
    service = MonitorService(config)
    serverapp.web_app.settings[SERVICE_KEY] = service
    watch = LeftoverWatch(service, serverapp.kernel_manager)
    serverapp.web_app.settings[WATCH_KEY] = watch
    service.on_close(watch.close)
    IOLoop.current().add_callback(watch.start)
    setup_handlers(serverapp.web_app)
    install(serverapp, service, watch.registry)
    serverapp.log.info(
        "gpu_magics: GPU panel endpoints at %sgpu-magics/api/ (source %s, every %.2f s)",
        serverapp.base_url,
        config.source,
        config.interval,
    )
