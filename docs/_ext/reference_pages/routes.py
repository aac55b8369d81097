"""The server extension's REST and websocket routes (``gpu_magics.server.routes.ROUTES``), with their methods and
who may call them."""

from __future__ import annotations

import inspect
import re
from dataclasses import dataclass
from typing import Any

from reference_pages.markdown import HEADER, code, table

METHODS = ("get", "post", "put", "patch", "delete")
_AUTHORIZE = re.compile(r"is_authorized\([^)]*?[\"'](\w+)[\"']")


@dataclass(frozen=True)
class Route:
    path: str
    method: str  # "GET", "POST", ..., "WEBSOCKET"
    authenticated: bool
    action: str | None  # the authorizer's action on the gpu_magics resource; None: not authorized
    resource: str | None
    help: str


def _decorated(source: str, name: str) -> bool:
    return re.search(rf"^\s*@(\w+\.)?{name}\b", source, re.MULTILINE) is not None


def routes() -> list[Route]:
    from jupyter_server.auth.utils import HTTP_METHOD_TO_AUTH_ACTION
    from tornado import web, websocket

    from gpu_magics.server.routes import NAMESPACE, ROUTES

    paths = {handler: f"/{NAMESPACE}/{path}" for path, handler in ROUTES}
    found = []
    for _, handler in ROUTES:
        is_socket = issubclass(handler, websocket.WebSocketHandler)
        for name in METHODS:
            method = getattr(handler, name)
            if method is getattr(web.RequestHandler, name) or (is_socket and name != "get"):
                continue
            source = inspect.getsource(method)
            explicit = _AUTHORIZE.search(source)
            if is_socket:
                verb = "WEBSOCKET"
                authenticated = _decorated(source, "ws_authenticated")
                action = explicit.group(1) if explicit else None
            else:
                verb = name.upper()
                authenticated = _decorated(source, "authenticated")
                action = HTTP_METHOD_TO_AUTH_ACTION[verb] if _decorated(source, "authorized") else None
            resource = getattr(handler, "auth_resource", None) if action else None
            owner = next(cls for cls in handler.__mro__ if name in vars(cls))
            said = _help(handler) if owner is handler or owner not in paths else f"Answers as `{verb} {paths[owner]}`."
            found.append(Route(paths[handler], verb, authenticated, action, resource, said))
    return found


def _help(handler: Any) -> str:
    """The handler's docstring, less the ``GET path``: that begins it."""
    text = " ".join((inspect.getdoc(handler) or "").split())
    found = re.match(r"^``(GET|POST|PUT|DELETE|PATCH) [^`?]+(\?[^`]*)?``:\s*", text)
    said = (text[found.end() :] if found else text).replace("``", "`")
    said = said[:1].upper() + said[1:]
    return f"Query `{found.group(2)}`: {said}" if found and found.group(2) else said


def _who(route: Route) -> str:
    if not route.authenticated:
        return "anyone"
    who = "a logged-in user (token or cookie)"
    if route.action is not None:
        who += f", authorized to {code(route.action)} {code(route.resource)}"
    if route.method in ("POST", "PUT", "PATCH", "DELETE"):
        who += "; with a cookie, the XSRF token too"
    return who


def page() -> str:
    rows = [(code(route.method), code(route.path), _who(route), route.help) for route in routes()]
    return (
        HEADER + "# REST API\n\n"
        "The server extension's routes, under the server's base URL (`{base_url}gpu-magics/...`). They serve the "
        "JupyterLab side panel; each answers JSON. Every route needs a logged-in user, and the server's authorizer "
        "decides on the `gpu_magics` resource (read for GET and the websocket, write for POST), so a JupyterHub "
        "role can grant or refuse the panel. A bad request is answered 4xx with a one-line reason.\n\n"
        + table(("method", "path", "who may call it", "what it does"), rows)
        + "\n"
    )
