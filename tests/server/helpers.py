"""Logging in as a browser does (cookies), for the XSRF and origin tests."""

from __future__ import annotations

from urllib.parse import urlencode

from tornado.httpclient import AsyncHTTPClient, HTTPResponse


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
