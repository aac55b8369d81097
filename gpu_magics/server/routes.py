"""URL patterns of the server extension."""

from __future__ import annotations

from typing import Any

from jupyter_server.utils import url_path_join

from gpu_magics.server.handlers import (
    ClustersHandler,
    DevicesHandler,
    HistoryHandler,
    ProcessesHandler,
    PruneClustersHandler,
)
from gpu_magics.server.leftovers.handlers import EndLeftoversHandler, LeftoversHandler
from gpu_magics.server.metrics.handlers import IdleHoldHandler
from gpu_magics.server.websocket import SamplesWebSocket

NAMESPACE = "gpu-magics"

ROUTES: tuple[tuple[str, type[Any]], ...] = (
    ("api/devices", DevicesHandler),
    ("api/history", HistoryHandler),
    ("api/clusters", ClustersHandler),
    ("api/clusters/prune", PruneClustersHandler),
    ("api/processes", ProcessesHandler),
    ("api/leftovers", LeftoversHandler),
    ("api/leftovers/end", EndLeftoversHandler),
    ("api/idle-hold", IdleHoldHandler),
    ("api/ws", SamplesWebSocket),
)


def setup_handlers(web_app: Any) -> None:
    """Add the routes under ``{base_url}gpu-magics/``."""
    base_url = web_app.settings["base_url"]
    web_app.add_handlers(".*$", [(url_path_join(base_url, NAMESPACE, path), handler) for path, handler in ROUTES])
