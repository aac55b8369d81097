"""Dashboard links that open from the user's browser, wherever JupyterLab is served from.

A scheduler's dashboard listens on the scheduler's host (``http://127.0.0.1:8787/status``), which a browser on
another machine cannot reach. When JupyterLab is served from a base URL (JupyterHub: ``/user/NAME/``) and
jupyter-server-proxy is installed, ``{base_url}proxy/{port}/status`` reaches it through the Jupyter server.
A link the user configured (``distributed.dashboard.link``) is always kept as it is.
"""

from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass
from urllib.parse import urlsplit

DEFAULT_LINK_TEMPLATE = "{scheme}://{host}:{port}/status"
HUB_PREFIX_ENV = "JUPYTERHUB_SERVICE_PREFIX"
LOCAL_HOSTS = frozenset({"127.0.0.1", "localhost", "::1", "[::1]"})


@dataclass(frozen=True)
class DashboardLink:
    """A dashboard URL for the browser, and why it may not open (``None`` when it should)."""

    url: str | None
    note: str | None = None


def proxy_available() -> bool:
    """Whether jupyter-server-proxy is importable here (it must run in the Jupyter server to help)."""
    return importlib.util.find_spec("jupyter_server_proxy") is not None


def link_for(
    raw: str | None,
    *,
    base_url: str | None,
    proxy: bool,
    user_template: str | None = None,
    remote_browser: bool = False,
) -> DashboardLink:
    """The link to show for the dashboard at ``raw``.

    ``base_url``: where JupyterLab is served from (``None`` when unknown); ``proxy``: whether the server has
    jupyter-server-proxy; ``user_template``: ``distributed.dashboard.link`` when the user changed it (then
    ``raw`` already follows it and is kept); ``remote_browser``: whether the browser is known to run on
    another machine (JupyterHub).
    """
    if raw is None:
        return DashboardLink(None)
    if user_template is not None and user_template != DEFAULT_LINK_TEMPLATE:
        return DashboardLink(raw)
    parts = urlsplit(raw)
    host, port = parts.hostname or "", parts.port
    if port is None:
        return DashboardLink(raw)
    local = host in LOCAL_HOSTS
    if proxy and base_url is not None and local:
        prefix = base_url if base_url.endswith("/") else base_url + "/"
        return DashboardLink(f"{prefix}proxy/{port}/status")
    if local and remote_browser:
        return DashboardLink(
            raw,
            f"{host}:{port} is the Jupyter server's own address: a browser on another machine cannot open it; "
            "install jupyter-server-proxy in the server's environment to reach it through JupyterLab",
        )
    if not local and proxy and base_url is not None:
        return DashboardLink(
            raw,
            f"the dashboard runs on {host}, not on the Jupyter server's host: it opens only if your browser "
            f"can reach {host}:{port} directly",
        )
    return DashboardLink(raw)


def for_kernel(raw: str | None) -> DashboardLink:
    """The link as a kernel can best tell: JupyterHub says where JupyterLab is served from
    (``$JUPYTERHUB_SERVICE_PREFIX``), and the kernel usually shares the server's environment."""
    template = _user_template()
    prefix = os.environ.get(HUB_PREFIX_ENV)
    return link_for(
        raw, base_url=prefix, proxy=proxy_available(), user_template=template, remote_browser=prefix is not None
    )


def _user_template() -> str | None:
    try:
        import dask

        value = dask.config.get("distributed.dashboard.link", default=None)
    except ImportError:  # no dask: no template
        return None
    return None if value is None else str(value)
