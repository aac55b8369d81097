"""``/gpu-magics/api/ws``: pushes a snapshot to each client at the interval it asks for.

Anonymous or unauthorized clients and foreign origins are refused with 403 before the upgrade. Client
messages are small JSON objects, validated: ``{"type": "configure", "interval": ms}`` (clamped to 100 ms ..
60 s) and ``{"type": "ping"}``; anything else gets ``{"type": "error", "message": ...}``.
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Callable
from typing import Any, TypeVar, cast

from jupyter_core.utils import ensure_async
from jupyter_server.base.handlers import JupyterHandler
from jupyter_server.base.websocket import WebSocketMixin
from tornado import web
from tornado.websocket import WebSocketClosedError, WebSocketHandler

try:  # jupyter_server >= 2.13: the decorator its start-up check recognizes
    from jupyter_server.auth.decorator import ws_authenticated
except ImportError:  # pragma: no cover - older servers run no such check
    _F = TypeVar("_F", bound=Callable[..., Any])

    def ws_authenticated(method: _F) -> _F:
        """Refuse an anonymous client with 403 (no redirect to the login page: meaningless to a websocket)."""

        @functools.wraps(method)
        def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
            if self.current_user is None:
                self.log.warning("Couldn't authenticate WebSocket connection")
                raise web.HTTPError(403)
            return method(self, *args, **kwargs)

        return cast(_F, wrapper)


from gpu_magics.monitor.models import Snapshot
from gpu_magics.server.handlers import AUTH_RESOURCE, SERVICE_KEY, config_json
from gpu_magics.server.jsonutil import dumps
from gpu_magics.server.service import STALE_STATUS, STARTING_STATUS, MonitorService, Subscription

MIN_CLIENT_INTERVAL_MS = 100
MAX_CLIENT_INTERVAL_MS = 60_000
MAX_MESSAGE_BYTES = 4096


def parse_client_message(raw: str | bytes) -> dict[str, Any]:
    """A validated client message; ``ValueError`` saying what is wrong otherwise."""
    if isinstance(raw, bytes):
        raise ValueError("binary messages are not accepted")
    if len(raw) > MAX_MESSAGE_BYTES:
        raise ValueError(f"message longer than {MAX_MESSAGE_BYTES} bytes")
    try:
        message = json.loads(raw)
    except json.JSONDecodeError:
        raise ValueError("message is not JSON") from None
    if not isinstance(message, dict):
        raise ValueError("message is not a JSON object")
    message_type = message.get("type")
    if message_type == "ping":
        return {"type": "ping"}
    if message_type == "configure":
        interval = message.get("interval")
        if isinstance(interval, bool) or not isinstance(interval, int | float) or not math.isfinite(interval):
            raise ValueError("configure needs 'interval': a number of milliseconds")
        clamped = min(MAX_CLIENT_INTERVAL_MS, max(MIN_CLIENT_INTERVAL_MS, float(interval)))
        return {"type": "configure", "interval": clamped}
    raise ValueError(f"unknown message type {message_type!r}: expected 'configure' or 'ping'")


class SamplesWebSocket(WebSocketMixin, WebSocketHandler, JupyterHandler):
    """One panel's live feed of snapshots."""

    auth_resource = AUTH_RESOURCE

    _subscription: Subscription | None = None
    _interval_ms: float = 1000.0
    _due: float = 0.0  # when (time.time()) the next snapshot is due to this client
    _pending: Any = None  # the future of the last write, to drop samples for a slow client

    @property
    def service(self) -> MonitorService:
        service: MonitorService = self.settings[SERVICE_KEY]
        return service

    @property
    def max_message_size(self) -> int:
        return MAX_MESSAGE_BYTES

    def set_default_headers(self) -> None:
        """No JupyterHandler headers (CSP and friends) on a websocket upgrade."""

    @ws_authenticated
    async def get(self, *args: Any, **kwargs: Any) -> None:
        """Refuse anonymous (``ws_authenticated``) and unauthorized clients with 403 before the upgrade; tornado
        checks the origin."""
        user = self.current_user
        if not await ensure_async(self.authorizer.is_authorized(self, user, "read", AUTH_RESOURCE)):
            raise web.HTTPError(403, f"not authorized to read {AUTH_RESOURCE}")
        await super().get(*args, **kwargs)

    async def open(self, *args: Any, **kwargs: Any) -> None:
        super().open(*args, **kwargs)
        self._interval_ms = self.service.config.interval * 1000
        self._subscription = self.service.add_listener(self._on_snapshot)
        snapshot = await self.service.current()  # a placeholder while a slow first read is under way
        self._send(
            {
                "type": "hello",
                "config": config_json(self.service.config),
                "interval": round(self._interval_ms),
                "snapshot": snapshot.to_json(),
            }
        )
        # After a placeholder, the first real snapshot goes out as soon as it is read.
        provisional = snapshot.status == STARTING_STATUS or (snapshot.status or "").startswith(f"{STALE_STATUS}:")
        self._due = 0.0 if provisional else snapshot.time + self._interval_ms / 1000

    def on_message(self, message: str | bytes) -> None:
        try:
            parsed = parse_client_message(message)
        except ValueError as error:
            self._send({"type": "error", "message": str(error)})
            return
        if parsed["type"] == "ping":
            self._send({"type": "pong"})
        elif parsed["type"] == "configure":
            self._interval_ms = parsed["interval"]
            self._due = 0.0
            if self._subscription is not None:
                self._subscription.set_interval(self._interval_ms / 1000)
            self._send({"type": "configured", "interval": round(self._interval_ms)})

    def on_close(self) -> None:
        if self._subscription is not None:
            self._subscription.remove()
            self._subscription = None

    def _on_snapshot(self, snapshot: Snapshot) -> None:
        # Send the sample nearest each due time, so the average rate is the one asked for.
        if snapshot.time < self._due - self.service.sample_interval / 2:
            return
        if self._pending is not None and not self._pending.done():
            return  # the client has not taken the last one yet: skip rather than queue
        interval = self._interval_ms / 1000
        self._due = max(self._due + interval, snapshot.time + interval / 2)
        self._send({"type": "snapshot", "snapshot": snapshot.to_json()})

    def _send(self, message: dict[str, Any]) -> None:
        if self.ws_connection is None or self.ws_connection.is_closing():
            return
        try:
            self._pending = self.write_message(dumps(message))
        except WebSocketClosedError:
            self.on_close()
