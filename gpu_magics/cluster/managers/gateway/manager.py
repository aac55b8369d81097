"""``%gpucluster --gateway``: a cluster from a Dask Gateway, the usual source of workers on a managed JupyterHub
whose notebooks run without GPUs. dask-gateway's ``Gateway`` does the talking: its address, proxy and auth come
from the user's dask-gateway config (``gateway.address``, ``gateway.auth``) unless the line names the address.
The line's ``--gateway-option KEY=VALUE`` are checked against what the gateway offers before anything starts;
``--connect NAME`` takes a running gateway cluster (they outlive kernels). Every request to the gateway is
bounded, and every failure is one line with nothing left running on the gateway."""

from __future__ import annotations

import contextlib
import time
from typing import TYPE_CHECKING, Any

from gpu_magics.cluster.managers import attach
from gpu_magics.cluster.managers.base import ClusterManager
from gpu_magics.cluster.managers.gateway.cluster_options import chosen_options
from gpu_magics.cluster.managers.gateway.service import WHAT, ask, close_gateway, command, make_gateway
from gpu_magics.cluster.options import PROG, ClusterOptions, GatewayOptions, gateway_short_name
from gpu_magics.cluster.reading import inspection
from gpu_magics.text.errors import LineError, ServiceError, StartFailed
from gpu_magics.text.units import format_duration, one_line

if TYPE_CHECKING:
    from distributed import Client

    from gpu_magics.cluster.background.starting import Starting

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
        self.asked = options.gateway or GatewayOptions()  # the gateway and the cluster the line asks for
        self.gateway: Any = None  # dask-gateway's client, once ``open`` made it
        self.typed = self.asked.address  # the address as the line gave it ("": dask-gateway's config): hints
        self.offered: Any = None  # the cluster options to make it with, once ``open`` checked them
        self.name = self.asked.connect_name  # the gateway's name for the cluster, once known
        self.owned = self.asked.connect_name is None
        self._start_words = "the gateway cluster did not start" if self.owned else "could not use the gateway cluster"
        workers = self.asked.workers
        self.requested = workers if workers is not None else (DEFAULT_WORKERS if self.owned else None)
        self._status_read = 0.0

    def open(self, reuse: bool = False) -> None:
        """The gateway client, and the line's options checked against what the gateway offers (or the cluster to
        connect to found), also where the running cluster is reused; one-line errors, nothing started
        (``finish`` closes the client)."""
        gateway = make_gateway(self.asked.address)
        with contextlib.ExitStack() as on_failure:
            on_failure.callback(close_gateway, gateway)  # whatever ends the check early closes the gateway client
            if self.name is not None:
                report = ask(gateway, gateway._cluster_report(self.name), f"find {self.name!r}")
                if report.status.name in ENDED:
                    raise LineError(
                        f"{WHAT} --connect: gateway cluster {self.name!r} is {report.status.name.lower()}; "
                        f"{command(self.asked.address, '--list')} shows the running ones"
                    )
            else:
                self.offered = chosen_options(gateway, self.asked.cluster_options)
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
            raise ServiceError(
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
                raise StartFailed(f"{WHAT}: gateway cluster {self.name!r} is {status.lower()}; {LOG_HINT}")
            if time.monotonic() >= deadline:
                raise StartFailed(
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
            raise StartFailed(
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
            raise StartFailed(f"{WHAT}: gateway cluster {self.name!r} is {status.lower()}; {LOG_HINT}")

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
        except ServiceError:  # the gateway is gone or silent: what it runs may outlive this kernel
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
