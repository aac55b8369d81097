"""``%gpucluster --gateway``: a cluster from a Dask Gateway, the usual source of workers on a managed JupyterHub
whose notebooks run without GPUs. dask-gateway's ``Gateway`` does the talking: its address, proxy and auth come
from the user's dask-gateway config (``gateway.address``, ``gateway.auth``) unless the line names the address.
The line's ``--gateway-option KEY=VALUE`` are checked against what the gateway offers before anything starts;
``--connect NAME`` takes a running gateway cluster (they outlive kernels). Every request to the gateway is
bounded, and every failure is one line with nothing left running on the gateway."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any, TypeVar

from IPython.core.error import UsageError

from gpu_magics.cluster.managers import attach, needs
from gpu_magics.cluster.managers.base import ClusterManager
from gpu_magics.cluster.options import PROG, ClusterOptions, gateway_short_name
from gpu_magics.cluster.reading import inspection
from gpu_magics.text.units import dropped, format_duration, one_line

if TYPE_CHECKING:
    from distributed import Client

    from gpu_magics.cluster.background.starting import Starting

T = TypeVar("T")

WHAT = f"{PROG} --gateway"
INSTALL = "pip install 'gpu-magics[gateway]' (dask-gateway)"
ANSWER_S = 10.0  # how long one request to the gateway's API may take
STATUS_EVERY_S = 1.0  # how often a start reads the gateway's view of its cluster (failed, stopped) while it waits
DEFAULT_WORKERS = 1
LABEL = "Dask Gateway"
ENDED = ("STOPPING", "STOPPED", "FAILED")
LOG_HINT = "the gateway's own log says why (its administrator can read it)"


class GatewayManager(ClusterManager):
    """A gateway cluster: made here (``owned``: stop and the kernel's end shut it down unless ``stop --keep``),
    or connected to by name (stop only detaches unless ``--close``). ``cluster`` is dask-gateway's
    ``GatewayCluster`` once ``connect`` has it."""

    keepable = True
    background = True  # the gateway starts a scheduler, then workers (pods): seconds to minutes; cells go on

    def __init__(self, options: ClusterOptions) -> None:
        super().__init__(None, LABEL)
        self.options = options
        self.gateway: Any = None  # dask-gateway's client, once ``open`` made it
        self.typed = options.gateway or ""  # the address as the line gave it ("": dask-gateway's config): hints
        self.offered: Any = None  # the cluster options to make it with, once ``open`` checked them
        self.name = options.connect_name  # the gateway's name for the cluster, once known
        self.owned = options.connect_name is None
        self._start_words = "the gateway cluster did not start" if self.owned else "could not use the gateway cluster"
        workers = options.workers
        self.requested = workers if workers is not None else (DEFAULT_WORKERS if self.owned else None)
        self._status_read = 0.0

    def open(self, reuse: bool = False) -> None:
        """The gateway client, and the line's options checked against what the gateway offers (or the cluster to
        connect to found), also where the running cluster is reused; one-line ``UsageError``s, nothing started
        (``finish`` closes the client)."""
        gateway = make_gateway(self.options.gateway)
        with contextlib.ExitStack() as on_failure:
            on_failure.callback(close_gateway, gateway)  # whatever ends the check early closes the gateway client
            if self.name is not None:
                report = ask(gateway, gateway._cluster_report(self.name), f"find {self.name!r}")
                if report.status.name in ENDED:
                    raise UsageError(
                        f"{WHAT} --connect: gateway cluster {self.name!r} is {report.status.name.lower()}; "
                        f"{command(self.options.gateway, '--list')} shows the running ones"
                    )
            else:
                self.offered = chosen_options(gateway, self.options.gateway_options)
            on_failure.pop_all()  # checked: the client stays open for the start
        self.gateway = gateway

    def same_as(self, running: ClusterManager | None, address: str | None) -> bool:
        """A gateway cluster in use, the one ``--connect`` names (a line without it reuses any)."""
        name, short = getattr(running, "name", None), gateway_short_name
        return isinstance(running, GatewayManager) and (self.name is None or short(str(name)) == short(self.name))

    @property
    def source(self) -> str:
        return f"from {self.label}" if self.owned else f"from {self.label}, not made here"

    @property
    def taken(self) -> str:
        return "up since" if self.owned else "connected at"

    @property
    def title(self) -> str:
        return LABEL

    # -- the start ------------------------------------------------------------------------------------------------
    def start(self, options: ClusterOptions, starting: Starting) -> Client:
        """Have the gateway make the cluster (or find the one named), wait until its scheduler runs, and connect."""
        import aiohttp
        from dask_gateway.client import GatewayClusterError, GatewayServerError

        if self.name is None:
            self.name = str(ask(self.gateway, self.gateway._submit(cluster_options=self.offered), "make a cluster"))
        short = gateway_short_name(self.name)
        self.label = LABEL if options.cluster_name == short else f"{LABEL}: {short}"  # the card names it once
        self._wait_running(options.start_timeout, starting)
        try:
            self.cluster = self.gateway.connect(self.name, shutdown_on_close=False)
        except (OSError, ValueError, aiohttp.ClientError, GatewayClusterError, GatewayServerError) as error:
            # the gateway's requests and the scheduler's TLS set-up; anything else is the start's own one line
            raise UsageError(
                f"{WHAT}: could not connect to gateway cluster {self.name!r} ({one_line(error)})"
            ) from None
        return attach.connect_manager(self.cluster, options.start_timeout)

    def _wait_running(self, timeout: float, starting: Starting) -> None:
        deadline = time.monotonic() + timeout
        while True:
            starting.check()  # stop (or the kernel's end) during the wait: the start ends, the cluster is shut down
            status = self.gateway_status()
            if status == "RUNNING":
                return
            if status in ENDED:
                raise UsageError(f"{WHAT}: gateway cluster {self.name!r} is {status.lower()}; {LOG_HINT}")
            if time.monotonic() >= deadline:
                raise UsageError(
                    f"{WHAT}: the gateway did not start the scheduler of {self.name!r} within {timeout:g} s "
                    f"(still {status.lower()}); --timeout SECONDS waits longer"
                )
            time.sleep(0.25)

    def gateway_status(self) -> str:
        """What the gateway says the cluster is: PENDING, RUNNING, STOPPING, STOPPED or FAILED (and, for a
        cluster connected to, when it started: its card tells its age, not the connection's)."""
        assert self.name is not None
        report = ask(self.gateway, self.gateway._cluster_report(self.name), f"read cluster {self.name!r}")
        if not self.owned and self.since is None:
            with contextlib.suppress(AttributeError, TypeError, ValueError, OSError):
                self.since = float(report.start_time.timestamp())
        return str(report.status.name)

    def await_workers(self, client: Client, options: ClusterOptions, starting: Starting) -> str | None:
        """Ask for ``--workers`` (a cluster connected to keeps its own count unless told) and wait ``--wait`` for
        them; none at all after that is the start's failure."""
        if self.requested is not None:
            self._ask(self.requested)
        expected = self.expected_workers() or asked_workers(client)
        starting.update(expected=expected)
        notice = self._wait_for_workers(client, options.start_wait, expected, starting)
        if notice is not None and not inspection.scheduler_workers(client) and self.owned:
            raise UsageError(
                f"{WHAT}: no worker came within {format_duration(options.start_wait)} (the gateway may lack the "
                "resources its options ask for, or its workers fail to start: its log says why); --wait SECONDS "
                "waits longer"
            )
        return notice

    def expected_workers(self) -> int:
        if self.adaptive is not None:
            return self.adaptive[0]
        return self.requested or 0

    def _check_started(self, seen: set[str]) -> None:
        """The gateway's view, read every second: a cluster it stopped or that failed gives no more workers."""
        if time.monotonic() - self._status_read < STATUS_EVERY_S:
            return
        self._status_read = time.monotonic()
        status = self.gateway_status()
        if status in ENDED:
            raise UsageError(f"{WHAT}: gateway cluster {self.name!r} is {status.lower()}; {LOG_HINT}")

    # -- scale, adapt, the end -----------------------------------------------------------------------------------
    def _ask(self, count: int) -> None:
        assert self.name is not None
        ask(self.gateway, self.gateway._scale_cluster(self.name, count), f"scale {self.name!r}")
        self.requested = count
        self.adaptive = None

    def adapt(self, minimum: int, maximum: int) -> None:
        assert self.name is not None
        ask(
            self.gateway,
            self.gateway._adapt_cluster(self.name, minimum=minimum, maximum=maximum),
            f"have {self.name!r} adapt",
        )
        self.adaptive = (minimum, maximum)

    def finish(self, name: str, keep: bool | None = None) -> str:
        """Shut the gateway cluster down (its scheduler and workers stop), or leave it running (``keep``; by
        default a cluster connected to); either way the gateway client here closes."""
        if keep or (keep is None and not self.owned):
            self._let_go()
            how = "; stop --close shuts it down" if keep is None else ""
            return (
                f"{PROG}: detached from {name!r}; gateway cluster {self.name} keeps running{how} "
                f"({command(self.typed, f'--connect {self.name}')} comes back to it)"
            )
        try:
            try:
                if self.name is not None and self.gateway is not None:
                    ask(self.gateway, self.gateway._stop_cluster(self.name), f"shut {self.name!r} down")
            finally:
                self._let_go()
        except UsageError:  # the gateway is gone or silent: what it runs may outlive this kernel
            return (
                f"{PROG}: stopped using {name!r}; the gateway did not answer, so gateway cluster {self.name} may "
                f"still run there ({command(self.typed, '--list')} shows it once the gateway is back)"
            )
        return f"{PROG}: stopped cluster {name!r} (gateway cluster {self.name} shut down)"

    def _let_go(self) -> None:
        """Close the ``GatewayCluster`` object and the gateway client here; the cluster on the gateway stays."""
        if self.cluster is not None:
            with contextlib.suppress(Exception):  # a close that fails any way: the cluster on the gateway stays
                self.cluster.close(shutdown=False)
            close_gateway(self.cluster.gateway)
        if self.gateway is not None:
            close_gateway(self.gateway)


def command(typed: str | None, rest: str) -> str:
    """``%gpucluster --gateway [ADDRESS] REST``: a line to copy, with the address where the user typed one."""
    return " ".join(part for part in (WHAT, typed, rest) if part)


def make_gateway(address: str | None) -> Any:
    """dask-gateway's ``Gateway`` for ``address`` ("" or ``None``: the one dask-gateway's config names)."""
    Gateway = needs.require("dask_gateway", WHAT, f"dask-gateway is not installed ({INSTALL})").Gateway
    try:
        return Gateway(address or None)
    except ValueError:
        raise UsageError(
            f"{WHAT}: no gateway address: give it ({PROG} --gateway http://HOST:8000) or set gateway.address in "
            "dask's config (a hub with a Dask Gateway usually does)"
        ) from None
    except Exception as error:  # whatever the library raises is the user's one line
        raise UsageError(f"{WHAT}: {one_line(error)}") from None


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
        raise UsageError(f"{WHAT}: {where} did not answer within {ANSWER_S:g} s (trying to {what})") from None
    except OSError as error:  # nothing listens there, or the name does not resolve (aiohttp's connection errors)
        raise UsageError(f"{WHAT}: {where} did not answer ({_reason(error)})") from None
    except Exception as error:  # any other failure: what answered is checked, then said in one line
        if not is_gateway(gateway):
            raise UsageError(
                f"{WHAT}: {gateway.address} did not answer as a Dask Gateway (check the address: on a hub it is "
                "gateway.address in dask's config)"
            ) from None
        if isinstance(error, (ValueError, GatewayClusterError)):  # its own words: no such cluster, a refused option
            raise UsageError(f"{WHAT}: {where} refused to {what}: {_first_line(error)}") from None
        if isinstance(error, GatewayServerError):
            raise UsageError(f"{WHAT}: {where} failed to {what}: {_first_line(error)}") from None
        status = getattr(error, "status", None)
        if status in (401, 403):
            raise UsageError(
                f"{WHAT}: {where} refused you ({status} {getattr(error, 'message', '')}): check gateway.auth in "
                "dask's config (type and kwargs), or the hub's API token"
            ) from None
        raise UsageError(f"{WHAT}: {where} did not answer ({one_line(error)})") from None


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
    return str(getattr(cause, "strerror", None) or _first_line(cause))


def _first_line(error: BaseException) -> str:
    lines = str(error).strip().splitlines()
    return lines[0] if lines else f"{type(error).__name__} (no reason given)"


def chosen_options(gateway: Any, pairs: tuple[tuple[str, str], ...]) -> Any:
    """The gateway's cluster options with the line's ``KEY=VALUE`` set (each checked as the gateway's field does);
    a key it does not offer is one line listing those it does."""
    offered = ask(gateway, gateway._cluster_options(), "list its cluster options")
    for key, text in pairs:
        if key not in offered:
            raise UsageError(f"{WHAT}: the gateway has no option {key!r}; it offers {describe_options(offered)}")
        field = offered._fields[key]
        try:
            value = _value(field, text)
            _check_bounds(field, value)
            offered[key] = value
        except (TypeError, ValueError) as error:
            raise UsageError(f"{WHAT} --gateway-option {key}={text}: {_first_line(error)}") from None
    return offered


def _value(field: Any, text: str) -> Any:
    """``text`` as the field's type takes it: a number, a bool, a choice, a mapping (YAML or JSON), or text."""
    from dask_gateway.options import Bool, Float, Integer, Mapping, Select

    if isinstance(field, Integer):
        try:
            return int(text)
        except ValueError:
            raise ValueError(f"expected a whole number, got {text!r}") from None
    if isinstance(field, Float):
        try:
            return float(text)
        except ValueError:
            raise ValueError(f"expected a number, got {text!r}") from None
    if isinstance(field, Bool):
        lowered = text.lower()
        if lowered not in ("true", "false", "yes", "no", "1", "0", "on", "off"):
            raise ValueError(f"expected true or false, got {text!r}")
        return lowered in ("true", "yes", "1", "on")
    if isinstance(field, Select) and text not in field.options:
        raise ValueError(f"choose one of {', '.join(field.options)}")
    if isinstance(field, Mapping):
        import yaml

        try:
            value = yaml.safe_load(text)
        except yaml.YAMLError:
            value = None
        if not isinstance(value, dict):
            raise ValueError('expected a mapping, like {"KEY": "value"}')
        return value
    return text


def _check_bounds(field: Any, value: Any) -> None:
    """A number within the gateway's bounds for it (said in its own units, not dask-gateway's ``4.000000``)."""
    low, high = getattr(field, "min", None), getattr(field, "max", None)
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return
    if low is not None and value < low:
        raise ValueError(f"at least {low:g} on this gateway, got {value:g}")
    if high is not None and value > high:
        raise ValueError(f"at most {high:g} on this gateway, got {value:g}")


def describe_options(offered: Any) -> str:
    """``worker_cores (whole number 1-4, now 1), profile (one of cpu, gpu; now 'cpu'), ...``."""
    from dask_gateway.options import Bool, Integer, Mapping, Number, Select

    parts = []
    for key, field in offered._fields.items():
        now = f"now {field.get()!r}"
        if isinstance(field, Select):
            parts.append(f"{key} (one of {', '.join(field.options)}; {now})")
        elif isinstance(field, Number):
            bounds = ""
            if field.min is not None or field.max is not None:
                low = "" if field.min is None else f"{field.min:g}"
                high = "" if field.max is None else f"{field.max:g}"
                bounds = f" {low}-{high}"
            parts.append(f"{key} ({'whole number' if isinstance(field, Integer) else 'number'}{bounds}, {now})")
        else:
            kind = "true/false" if isinstance(field, Bool) else "mapping" if isinstance(field, Mapping) else "text"
            parts.append(f"{key} ({kind}, {now})")
    return ", ".join(parts) if parts else "none"


def asked_workers(client: Client) -> int:
    """How many workers the gateway cluster's scheduler has been asked for (its gateway service's target; 0 where
    it cannot say): a cluster made and scaled elsewhere (``--connect``, ``--from`` a ``GatewayCluster``)."""

    def target(dask_scheduler: Any) -> int:
        service = getattr(dask_scheduler, "services", {}).get("gateway")
        if service is None:
            return 0
        minimum = getattr(service, "minimum", None)
        return int(max(getattr(service, "count", 0) or 0, minimum or 0))

    try:
        return int(client.run_on_scheduler(target))
    except (OSError, RuntimeError, TypeError, ValueError):  # comm failed, timed out; loop gone; an odd target
        return 0


def list_clusters(address: str | None, current: str | None) -> str:
    """``%gpucluster --gateway --list``: the user's running and pending clusters on the gateway, one a line, then
    the cluster options it offers (for ``--gateway-option``); each hint a line to copy."""
    gateway = make_gateway(address)
    try:
        reports = ask(gateway, gateway._clusters(), "list your clusters")
        offered = ask(gateway, gateway._cluster_options(), "list its cluster options")
    finally:
        close_gateway(gateway)
    options_line = f"cluster options ({command(address, '--gateway-option KEY=VALUE')}): {describe_options(offered)}"
    if not reports:
        empty = f"{PROG}: no clusters of yours on the gateway at {gateway.address} ({command(address, '')} makes one)"
        return f"{empty}\n{options_line}"
    lines = [f"{PROG}: your clusters on the gateway at {gateway.address}:"]
    for report in sorted(reports, key=lambda r: r.start_time):
        options = ", ".join(f"{key}={value}" for key, value in sorted((report.options or {}).items()))
        mark = " (in use here)" if report.name == current else ""
        lines.append(
            f"  {report.name}  {report.status.name.lower()}  since {report.start_time:%Y-%m-%d %H:%M}"
            + (f"  {options}" if options else "")
            + mark
        )
    others = [r.name for r in sorted(reports, key=lambda r: r.start_time) if r.name != current]
    if others:
        lines.append(f"{command(address, f'--connect {others[-1]}')} connects to the newest (any NAME above works)")
    lines.append(options_line)
    return "\n".join(lines)
