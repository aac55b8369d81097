"""Logging in as a browser does (cookies), for the XSRF and origin tests; a kernel of the test's server."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from urllib.parse import urlencode

from tornado.httpclient import AsyncHTTPClient, HTTPClientError, HTTPResponse

Fetch = Callable[..., Awaitable[HTTPResponse]]


def _cookies(response: HTTPResponse) -> dict[str, str]:
    cookies = {}
    for header in response.headers.get_list("Set-Cookie"):
        name, _, rest = header.partition("=")
        cookies[name.strip()] = rest.split(";", 1)[0]
    return cookies


async def login(base: str, token: str) -> dict[str, str]:
    """Log in through the login form, as a browser does; returns the cookies (session and ``_xsrf``)."""
    client = AsyncHTTPClient()
    page = await client.fetch(f"{base}login")
    cookies = _cookies(page)
    xsrf = cookies["_xsrf"]
    response = await client.fetch(
        f"{base}login",
        method="POST",
        body=urlencode({"password": token, "_xsrf": xsrf}),
        headers={"Cookie": f"_xsrf={xsrf}"},
        follow_redirects=False,
        raise_error=False,
    )
    assert response.code == 302, response.code
    cookies.update(_cookies(response))
    return cookies


def cookie_header(cookies: dict[str, str]) -> str:
    return "; ".join(f"{name}={value}" for name, value in cookies.items())


@contextlib.asynccontextmanager
async def server_kernel(jp_fetch: Fetch) -> AsyncIterator[str]:
    """A kernel the test's server runs (its id), shut down at the end."""
    started = json.loads((await jp_fetch("api", "kernels", method="POST", body=json.dumps({"name": "python3"}))).body)
    try:
        yield str(started["id"])
    finally:
        await delete_kernel(jp_fetch, str(started["id"]))


async def delete_kernel(jp_fetch: Fetch, kernel_id: str) -> None:
    """Shut a kernel down; one already gone (the test killed it, the server let it go) answers 404, which is fine."""
    try:
        await jp_fetch("api", "kernels", kernel_id, method="DELETE")
    except HTTPClientError as error:
        if error.code != 404:
            raise
