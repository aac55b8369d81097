"""The samples websocket: pushes, client messages validated, anonymous clients and foreign origins refused."""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest
from tornado.httpclient import HTTPClientError, HTTPRequest
from tornado.websocket import WebSocketClientConnection, websocket_connect

from gpu_magics.server.websocket import parse_client_message

from .helpers import cookie_header, login

WS_PATH = ("gpu-magics", "api", "ws")


async def receive(ws: WebSocketClientConnection, kind: str, limit: int = 50) -> dict[str, Any]:
    """The next message of type ``kind`` (skipping pushed snapshots in between)."""
    for _ in range(limit):
        raw = await ws.read_message()
        assert raw is not None, "the server closed the websocket"
        message: dict[str, Any] = json.loads(raw)
        if message["type"] == kind:
            return message
    raise AssertionError(f"no {kind!r} message in {limit} messages")


async def test_hello_then_snapshots(jp_ws_fetch: Any) -> None:
    ws = await jp_ws_fetch(*WS_PATH)
    hello = await receive(ws, "hello")
    assert hello["config"]["source"] == "fake"
    assert len(hello["snapshot"]["gpus"]) == 2
    first = await receive(ws, "snapshot")
    second = await receive(ws, "snapshot")
    assert second["snapshot"]["time"] > first["snapshot"]["time"]
    ws.close()


async def test_configure_clamps_interval(jp_ws_fetch: Any) -> None:
    ws = await jp_ws_fetch(*WS_PATH)
    await receive(ws, "hello")
    await ws.write_message(json.dumps({"type": "configure", "interval": 5}))
    assert (await receive(ws, "configured"))["interval"] == 100
    await ws.write_message(json.dumps({"type": "configure", "interval": 10**9}))
    assert (await receive(ws, "configured"))["interval"] == 60_000
    await ws.write_message(json.dumps({"type": "ping"}))
    await receive(ws, "pong")
    ws.close()


@pytest.mark.parametrize(
    "message",
    [
        "not json",
        "[1, 2]",
        json.dumps({"type": "shutdown"}),
        json.dumps({"type": "configure"}),
        json.dumps({"type": "configure", "interval": "fast"}),
        json.dumps({"type": "configure", "interval": True}),
        '{"type": "configure", "interval": NaN}',
    ],
)
async def test_bad_messages_get_an_error_and_the_socket_stays_up(jp_ws_fetch: Any, message: str) -> None:
    ws = await jp_ws_fetch(*WS_PATH)
    await receive(ws, "hello")
    await ws.write_message(message)
    error = await receive(ws, "error")
    assert error["message"]
    await ws.write_message(json.dumps({"type": "ping"}))
    await receive(ws, "pong")
    ws.close()


async def test_binary_and_huge_messages(jp_ws_fetch: Any) -> None:
    ws = await jp_ws_fetch(*WS_PATH)
    await receive(ws, "hello")
    await ws.write_message(b"\x00\x01", binary=True)
    assert "binary" in (await receive(ws, "error"))["message"]
    await ws.write_message("x" * 100_000)
    for _ in range(100):  # the server closes a socket that sends more than it accepts
        if await ws.read_message() is None:
            break
    else:
        raise AssertionError("the websocket stayed open after an oversized message")


def test_parse_client_message_unit() -> None:
    assert parse_client_message('{"type": "ping", "extra": 1}') == {"type": "ping"}
    assert parse_client_message('{"type": "configure", "interval": 250}') == {"type": "configure", "interval": 250}
    with pytest.raises(ValueError, match="unknown message type"):
        parse_client_message('{"type": 3}')


def _ws_url(jp_serverapp: Any, jp_base_url: str) -> str:
    return f"ws://127.0.0.1:{jp_serverapp.port}{jp_base_url}gpu-magics/api/ws"


async def test_anonymous_websocket_is_refused(jp_serverapp: Any, http_server_client: Any, jp_base_url: str) -> None:
    with pytest.raises(HTTPClientError) as error:
        await websocket_connect(_ws_url(jp_serverapp, jp_base_url))
    assert error.value.code == 403


async def test_wrong_token_websocket_is_refused(jp_serverapp: Any, http_server_client: Any, jp_base_url: str) -> None:
    request = HTTPRequest(_ws_url(jp_serverapp, jp_base_url), headers={"Authorization": "token wrong"})
    with pytest.raises(HTTPClientError) as error:
        await websocket_connect(request)
    assert error.value.code == 403


async def test_cookie_websocket_checks_the_origin(jp_serverapp: Any, http_server_client: Any, jp_base_url: str) -> None:
    """A browser logged in with a cookie may connect from the server's own page, not from another site."""
    base = f"http://127.0.0.1:{jp_serverapp.port}{jp_base_url}"
    cookie = cookie_header(await login(base, jp_serverapp.identity_provider.token))
    url = _ws_url(jp_serverapp, jp_base_url)
    own = f"http://127.0.0.1:{jp_serverapp.port}"
    ws = await websocket_connect(HTTPRequest(url, headers={"Cookie": cookie, "Origin": own}))
    await receive(ws, "hello")
    ws.close()
    with pytest.raises(HTTPClientError) as error:
        await websocket_connect(HTTPRequest(url, headers={"Cookie": cookie, "Origin": "http://evil.example"}))
    assert error.value.code == 403


async def test_push_rate_follows_the_asked_interval(jp_ws_fetch: Any) -> None:
    ws = await jp_ws_fetch(*WS_PATH)
    await receive(ws, "hello")
    await ws.write_message(json.dumps({"type": "configure", "interval": 300}))
    await receive(ws, "configured")
    times = [(await receive(ws, "snapshot"))["snapshot"]["time"] for _ in range(5)]
    gaps = [later - earlier for earlier, later in itertools.pairwise(times)]
    assert 0.2 <= sum(gaps) / len(gaps) <= 0.45, gaps  # the server samples every 0.1 s
    ws.close()
