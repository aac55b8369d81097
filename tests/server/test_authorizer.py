"""A custom authorizer that denies the ``gpu_magics`` resource shuts every endpoint, and only those."""

from __future__ import annotations

from typing import Any

import pytest
from jupyter_server.auth import Authorizer
from tornado.httpclient import HTTPClientError


class DenyGpuMagics(Authorizer):
    """Allows everything except the gpu_magics resource."""

    def is_authorized(self, handler: Any, user: Any, action: str, resource: str) -> bool:
        return resource != "gpu_magics"


@pytest.fixture
def jp_server_config(runtime_dir: Any) -> dict[str, Any]:
    return {
        "ServerApp": {"jpserver_extensions": {"gpu_magics": True}, "authorizer_class": DenyGpuMagics},
        "GpuMagicsServer": {"source": "fake", "fake_gpus": 1, "interval": 0.1},
    }


@pytest.mark.parametrize(
    ("method", "route"),
    [("GET", "devices"), ("GET", "history"), ("GET", "clusters"), ("GET", "processes"), ("POST", "clusters/prune")],
)
async def test_denied_routes(jp_fetch: Any, method: str, route: str) -> None:
    with pytest.raises(HTTPClientError) as error:
        await jp_fetch("gpu-magics", "api", *route.split("/"), method=method, body="{}" if method == "POST" else None)
    assert error.value.code == 403


async def test_denied_websocket(jp_ws_fetch: Any) -> None:
    with pytest.raises(HTTPClientError) as error:
        await jp_ws_fetch("gpu-magics", "api", "ws")
    assert error.value.code == 403


async def test_other_resources_still_work(jp_fetch: Any) -> None:
    response = await jp_fetch("api", "contents")
    assert response.code == 200
