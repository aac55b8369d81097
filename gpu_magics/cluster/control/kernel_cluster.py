"""The cluster a kernel uses and what it learnt about it: plain state shared by the lifecycle's modules, and which
one is in use."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import TYPE_CHECKING

from gpu_magics.cluster.control import owner
from gpu_magics.text.units import dropped

if TYPE_CHECKING:
    from gpu_magics.cluster.background.starting import Starting
    from gpu_magics.cluster.reading.running import ActiveCluster


_in_use: ActiveCluster | None = None
_starting: Starting | None = None


def starting() -> Starting | None:
    """The start under way (or failed and not yet said), or ``None``; only the lifecycle's verbs set it, on the
    owner thread (``owner.change``)."""
    return _starting


def set_starting(start: Starting | None) -> None:
    global _starting
    owner.require_owner("setting the start under way")
    _starting = start


def in_use() -> ActiveCluster | None:
    """The cluster this kernel uses now, or ``None``; ``cluster.queries`` reads it, only ``lifecycle`` sets it."""
    return _in_use


def set_in_use(cluster: ActiveCluster | None) -> ActiveCluster | None:
    """Make ``cluster`` the one in use (``None``: none), on the owner thread; returns the one it replaces. The
    listeners hear of it on the verb's thread, once its change is made."""
    global _in_use
    owner.require_owner("setting the cluster in use")
    previous, _in_use = _in_use, cluster
    if previous is not cluster:
        owner.afterwards(lambda: _tell_listeners(cluster))  # on the verb's thread: they may talk to the workers
    return previous


def _tell_listeners(cluster: ActiveCluster | None) -> None:
    for listener in list(_listeners):
        try:
            listener(cluster)
        except Exception as error:  # a listener never stops the lifecycle
            dropped("telling a listener of the cluster in use", error)


Listener = Callable[["ActiveCluster | None"], None]
_listeners: list[Listener] = []


def on_change(listener: Listener) -> Callable[[], None]:
    """Call ``listener`` with the new cluster (``None``: none) whenever the cluster in use changes, before the
    lifecycle undoes what the old one set; returns what removes the listener."""
    _listeners.append(listener)

    def remove() -> None:
        with contextlib.suppress(ValueError):
            _listeners.remove(listener)

    return remove
