"""The Dask Gateway itself: its client made (``make_gateway``) and closed once (``close_gateway``), each request
bounded and each way it fails one line naming the gateway (``ask``), and the lines to copy that name it
(``command``)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Coroutine
from typing import Any, TypeVar

from gpu_magics.cluster.managers import needs
from gpu_magics.cluster.options import PROG
from gpu_magics.text.errors import LineError, ServiceError
from gpu_magics.text.units import dropped, one_line

T = TypeVar("T")

WHAT = f"{PROG} --gateway"
INSTALL = "pip install 'gpu-magics[gateway]' (dask-gateway)"
ANSWER_S = 10.0  # how long one request to the gateway's API may take


def command(typed: str | None, rest: str) -> str:
    """``%gpucluster --gateway [ADDRESS] REST``: a line to copy, with the address where the user typed one."""
    return " ".join(part for part in (WHAT, typed, rest) if part)


def make_gateway(address: str | None) -> Any:
    """dask-gateway's ``Gateway`` for ``address`` ("" or ``None``: the one dask-gateway's config names)."""
    Gateway = needs.require("dask_gateway", WHAT, f"dask-gateway is not installed ({INSTALL})").Gateway
    try:
        return Gateway(address or None)
    except ValueError:
        raise LineError(
            f"{WHAT}: no gateway address: give it ({PROG} --gateway http://HOST:8000) or set gateway.address in "
            "dask's config (a hub with a Dask Gateway usually does)"
        ) from None
    except Exception as error:  # whatever the library raises is the user's one line
        raise ServiceError(f"{WHAT}: {one_line(error)}") from None


def close_gateway(gateway: Any) -> None:
    """Close a ``Gateway`` client once: a second ``close()`` (its ``__del__`` does one) asks distributed for a
    loop that is gone and prints a traceback to the notebook."""
    with contextlib.suppress(Exception):  # a close that fails any way (its loop is gone): the client is let go
        gateway.close()
    with contextlib.suppress(AttributeError, TypeError):  # an object that refuses the attribute
        gateway.close = lambda: None


def ask(gateway: Any, request: Coroutine[Any, Any, T], what: str) -> T:
    """Run one request to the gateway (a coroutine of dask-gateway's client) within ``ANSWER_S``; each way it can
    fail is one line naming the gateway. A server that answers but is not a Dask Gateway (a web page, another
    service's API) is said to be so, not quoted."""
    from dask_gateway.client import GatewayClusterError, GatewayServerError

    async def bounded() -> T:
        return await asyncio.wait_for(request, ANSWER_S)

    where = f"the gateway at {gateway.address}"
    try:
        return gateway.sync(bounded)
    except TimeoutError:
        raise ServiceError(f"{WHAT}: {where} did not answer within {ANSWER_S:g} s (trying to {what})") from None
    except OSError as error:  # nothing listens there, or the name does not resolve (aiohttp's connection errors)
        raise ServiceError(f"{WHAT}: {where} did not answer ({_reason(error)})") from None
    except Exception as error:  # any other failure: what answered is checked, then said in one line
        if not is_gateway(gateway):
            raise ServiceError(
                f"{WHAT}: {gateway.address} did not answer as a Dask Gateway (check the address: on a hub it is "
                "gateway.address in dask's config)"
            ) from None
        if isinstance(error, (ValueError, GatewayClusterError)):  # its own words: no such cluster, a refused option
            raise ServiceError(f"{WHAT}: {where} refused to {what}: {first_line(error)}") from None
        if isinstance(error, GatewayServerError):
            raise ServiceError(f"{WHAT}: {where} failed to {what}: {first_line(error)}") from None
        status = getattr(error, "status", None)
        if status in (401, 403):
            raise ServiceError(
                f"{WHAT}: {where} refused you ({status} {getattr(error, 'message', '')}): check gateway.auth in "
                "dask's config (type and kwargs), or the hub's API token"
            ) from None
        raise ServiceError(f"{WHAT}: {where} did not answer ({one_line(error)})") from None


def is_gateway(gateway: Any) -> bool:
    """Whether ``gateway.address`` answers as a Dask Gateway does (its ``/api/version``, which needs no login)."""

    import aiohttp

    async def version() -> Any:
        session = gateway._session
        if session is None:
            session = gateway._session = aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True))
        async with session.get(f"{gateway.address}/api/version", **gateway._request_kwargs) as response:
            return await response.json() if response.status == 200 else None

    async def bounded() -> Any:
        return await asyncio.wait_for(version(), ANSWER_S)

    try:
        answer = gateway.sync(bounded)
    except (OSError, ValueError, RuntimeError, aiohttp.ClientError) as error:  # no answer, not JSON, its loop gone
        dropped("asking whether a Dask Gateway answers", error)
        return False
    return isinstance(answer, dict) and "version" in answer


def _reason(error: OSError) -> str:
    """``"Name or service not known"``, ``"Connect call failed ..."``: why a connection failed, without the
    error's own restatement of the address."""
    cause = getattr(error, "os_error", None) or error
    if isinstance(cause, ConnectionRefusedError):
        return "nothing listens there"
    return str(getattr(cause, "strerror", None) or first_line(cause))


def first_line(error: BaseException) -> str:
    lines = str(error).strip().splitlines()
    return lines[0] if lines else f"{type(error).__name__} (no reason given)"
