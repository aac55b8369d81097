"""State changes need the XSRF token when the user is logged in with a cookie (a browser)."""

from __future__ import annotations

from typing import Any

import pytest
from tornado.httpclient import AsyncHTTPClient, HTTPClientError

from .helpers import cookie_header, login


@pytest.fixture
def server(jp_serverapp: Any, http_server_client: Any, jp_base_url: str) -> tuple[str, str]:
    """The server's base URL and its token."""
    return f"http://127.0.0.1:{jp_serverapp.port}{jp_base_url}", jp_serverapp.identity_provider.token


async def test_cookie_get_works(server: tuple[str, str]) -> None:
    base = server[0]
    cookies = await login(*server)
    cookie = cookie_header(cookies)
    response = await AsyncHTTPClient().fetch(f"{base}gpu-magics/api/clusters", headers={"Cookie": cookie})
    assert response.code == 200


@pytest.mark.parametrize("route", ["clusters/prune", "leftovers/end"])
async def test_cookie_post_without_xsrf_is_refused(server: tuple[str, str], route: str) -> None:
    base = server[0]
    cookies = await login(*server)
    cookie = cookie_header(cookies)
    with pytest.raises(HTTPClientError) as error:
        await AsyncHTTPClient().fetch(
            f"{base}gpu-magics/api/{route}", method="POST", body="{}", headers={"Cookie": cookie}
        )
    assert error.value.code == 403


async def test_cookie_post_with_xsrf_works(server: tuple[str, str]) -> None:
    base = server[0]
    cookies = await login(*server)
    cookie = cookie_header(cookies)
    response = await AsyncHTTPClient().fetch(
        f"{base}gpu-magics/api/clusters/prune",
        method="POST",
        body="{}",
        headers={"Cookie": cookie, "X-XSRFToken": cookies["_xsrf"]},
    )
    assert response.code == 200
