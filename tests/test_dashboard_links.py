"""Dashboard links that open from the user's browser: through jupyter-server-proxy under a base URL, the raw
address with a reason otherwise, and the user's own ``distributed.dashboard.link`` kept."""

from __future__ import annotations

import dask
import pytest

from gpu_magics.cluster.dashboard import links as dashboard_links
from gpu_magics.cluster.dashboard.links import link_for

RAW = "http://127.0.0.1:8787/status"


def test_proxied_under_the_base_url_when_the_server_has_the_proxy() -> None:
    assert link_for(RAW, base_url="/user/ada/", proxy=True).url == "/user/ada/proxy/8787/status"
    assert link_for(RAW, base_url="/user/ada", proxy=True).url == "/user/ada/proxy/8787/status"
    assert link_for(RAW, base_url="/", proxy=True).url == "/proxy/8787/status"


def test_raw_address_with_a_reason_when_the_browser_is_elsewhere_and_no_proxy() -> None:
    link = link_for(RAW, base_url="/user/ada/", proxy=False, remote_browser=True)
    assert link.url == RAW
    assert link.note is not None and "jupyter-server-proxy" in link.note


def test_plain_local_use_keeps_the_raw_address_silently() -> None:
    assert link_for(RAW, base_url=None, proxy=False) == dashboard_links.DashboardLink(RAW, None)


def test_a_dashboard_on_another_host_is_not_proxied_and_says_so() -> None:
    link = link_for("http://10.1.2.3:8787/status", base_url="/", proxy=True)
    assert link.url == "http://10.1.2.3:8787/status"
    assert link.note is not None and "10.1.2.3" in link.note


def test_a_link_template_the_user_set_is_kept() -> None:
    mine = "https://dash.example.org/{port}/status"
    assert link_for("https://dash.example.org/8787/status", base_url="/", proxy=True, user_template=mine).url == (
        "https://dash.example.org/8787/status"
    )


def test_no_dashboard_no_link() -> None:
    assert link_for(None, base_url="/", proxy=True) == dashboard_links.DashboardLink(None, None)


def test_the_kernel_reads_the_hub_prefix_and_the_users_template(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(dashboard_links.HUB_PREFIX_ENV, "/user/ada/")
    monkeypatch.setattr(dashboard_links, "proxy_available", lambda: True)
    assert dashboard_links.for_kernel(RAW).url == "/user/ada/proxy/8787/status"
    with dask.config.set({"distributed.dashboard.link": "{JUPYTERHUB_SERVICE_PREFIX}x/{port}"}):
        assert dashboard_links.for_kernel("/user/ada/x/8787").url == "/user/ada/x/8787"
    monkeypatch.setattr(dashboard_links, "proxy_available", lambda: False)
    link = dashboard_links.for_kernel(RAW)
    assert link.url == RAW and link.note is not None
