"""One line for a cluster cell whose cluster stopped or went away while it ran.

distributed cancels the futures of a client that closes (``%gpucluster stop`` from the side panel, another
thread, kernel shutdown) or loses its scheduler, and the cell then raises ``FutureCancelledError: ... cancelled
for reason: unknown`` (or ``scheduler-connection-lost``) from deep inside the client: that says neither what
happened nor what to do next.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from typing import TYPE_CHECKING

from gpu_magics.cluster.control import queries

if TYPE_CHECKING:
    from distributed import Client


def stopped_message() -> str:
    """The line for a cell whose cluster was stopped while it ran (with the command that starts one here)."""
    return (
        "%%gpurun: the cluster was stopped while this cell ran, and its tasks were cancelled; "
        f"start one with {queries.start_cluster_command()} and run the cell again"
    )


def went_away_message() -> str:
    """The line for a cell whose cluster's scheduler went away while it ran."""
    return (
        "%%gpurun: the cluster's scheduler went away while this cell ran, and its tasks were cancelled; "
        f"start a new cluster with {queries.start_cluster_command()} --replace and run the cell again"
    )


LOST_CONNECTION = "scheduler-connection-lost"


def lost_cluster_message(error: BaseException, client: Client | None, current: Client | None) -> str | None:
    """The line to show when ``error`` is the cancellation of a cell's tasks because ``client``'s cluster
    stopped (``current``, the cluster client in use now, is no longer it, or it closed) or its scheduler went
    away; ``None`` for any other error, and for a cancellation while the cluster still runs."""
    if client is None or not is_cancellation(error):
        return None
    status = str(getattr(client, "status", ""))
    if LOST_CONNECTION in cancel_reasons(error) or status == "connecting":
        return went_away_message()
    if status in ("closing", "closed") or current is not client:
        return stopped_message()
    return None


def is_cancellation(error: BaseException) -> bool:
    """Whether ``error`` is a cancellation (distributed's ``CancelledError`` is ``concurrent.futures``')."""
    return isinstance(error, (concurrent.futures.CancelledError, asyncio.CancelledError))


def cancel_reasons(error: BaseException) -> set[str]:
    """The reasons distributed gave for cancelling (``FutureCancelledError.reason``, or each group's reason of a
    ``FuturesCancelledError``)."""
    reasons = {str(error.reason)} if hasattr(error, "reason") else set()
    for group in getattr(error, "error_groups", ()) or ():
        reason = getattr(group, "reason", None)
        if reason is not None:
            reasons.add(str(reason))
    return reasons
