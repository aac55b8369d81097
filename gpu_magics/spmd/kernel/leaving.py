"""When a kernel leaves its cluster (killed, restarted, or its client closed), its rank processes end, also on
workers that outlive it (an attached cluster, SLURM jobs).

A scheduler plugin, registered once per kernel when its ranks start, watches for the kernel's client to leave
(``SchedulerPlugin.remove_client``) and then tells every worker to end that kernel's ranks (``host.end`` removes
the worker plugin that keeps them). Its class is made in a function so that it travels by value: the scheduler
needs nothing of this package installed. A worker that closes ends its ranks through that plugin's teardown, and
one whose process dies takes its rank process with it anyway (the rank ends when its host's end of the socket
closes).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gpu_magics.text.units import dropped

if TYPE_CHECKING:
    from distributed import Client

PLUGIN_PREFIX = "gpu-magics-spmd-leaving-"


def _plugin_class() -> type:
    import asyncio

    from distributed.diagnostics.plugin import SchedulerPlugin

    class EndRanksWhenClientLeaves(SchedulerPlugin):
        """Ends ``owner``'s rank processes on every worker once the client ``owner`` leaves the scheduler."""

        idempotent = True

        def __init__(self, owner: str, message: dict[str, Any]) -> None:
            self.owner, self.message = owner, message
            self.name = PLUGIN_PREFIX + owner

        def remove_client(self, scheduler: Any, client: str) -> None:
            if client != self.owner:
                return
            self._task = asyncio.ensure_future(scheduler.broadcast(msg=dict(self.message), on_error="ignore"))

    return EndRanksWhenClientLeaves


def watch(client: Client, owner: str) -> None:
    """Register the plugin for ``owner`` on ``client``'s scheduler (never raises: without it, ranks on workers
    that outlive the kernel end only with their workers)."""
    try:
        from distributed.protocol.pickle import dumps

        from gpu_magics.spmd.worker import host

        message = {"op": "run", "function": dumps(host.end), "args": dumps((owner,)), "kwargs": dumps({}), "wait": True}
        client.register_plugin(_plugin_class()(owner, message))
    except Exception as error:  # without it, ranks end with their workers
        dropped("registering the plugin that ends the ranks", error)
