"""The idle timeout (``--idle-timeout``): a watch that closes the cluster in use (attached: detaches) after a while
without a task, through ``stop``, and says so (between cells: once, at the top of the next cell)."""

from __future__ import annotations

from gpu_magics.cluster.background import idle
from gpu_magics.cluster.control import owner, record_writer
from gpu_magics.cluster.control.machine.events import SwapService, accepted
from gpu_magics.cluster.control.verbs.stop import NO_CLUSTER, stop
from gpu_magics.cluster.options import PROG
from gpu_magics.cluster.reading.running import ActiveCluster, Role
from gpu_magics.text.said import say


def watch(current: ActiveCluster, timeout: float) -> None:
    """Close ``current`` (attached: detach) after ``timeout`` seconds without a task; 0 stops watching."""
    owner.post(SwapService(current, Role.IDLE_TIMEOUT, watcher(current, timeout)))  # the old one stops
    if current.record is not None:
        record_writer.write_record(current, refresh=True)


def watcher(current: ActiveCluster, timeout: float) -> idle.IdleWatcher | None:
    """A watcher that closes ``current`` after ``timeout`` seconds without a task (0: none)."""
    if timeout <= 0:
        return None

    def changed() -> None:  # idle or busy again: the record shows the time left
        if current.record is not None:
            record_writer.write_record(current, refresh=True)

    made = idle.IdleWatcher(current.client, timeout, lambda: _close_idle(current, made), changed)
    return made


def _close_idle(watched: ActiveCluster, watcher: idle.IdleWatcher) -> None:
    """The idle watcher's end (on its thread): close the cluster it watched (if still in use, and this watch still
    its idle timeout's) and say so."""
    if not accepted(owner.post(SwapService(watched, Role.IDLE_TIMEOUT, None, only_if=watcher))):
        return
    if stop(only=watched) == NO_CLUSTER:
        return
    name, gpus = watched.options.address or watched.name, watched.workers_kind != "cpu"
    say(idle.closed_line(PROG, watched.owned, name, watcher.timeout, gpus))
