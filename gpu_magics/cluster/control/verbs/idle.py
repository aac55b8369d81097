"""The idle timeout (``--idle-timeout``): a watch that closes the cluster in use (attached: detaches) after a while
without a task, through ``stop``, and says so."""

from __future__ import annotations

from gpu_magics.cluster.background import idle
from gpu_magics.cluster.control import kernel_cluster, owner, record_writer
from gpu_magics.cluster.control.verbs.stop import NO_CLUSTER, stop
from gpu_magics.cluster.options import PROG
from gpu_magics.cluster.reading.running import ActiveCluster


def watch(current: ActiveCluster, timeout: float) -> None:
    """Close ``current`` (attached: detach) after ``timeout`` seconds without a task; 0 stops watching."""
    old, new = current.idle, watcher(current, timeout)
    if old is not None:
        old.stop()
    owner.change(lambda: setattr(current, "idle", new))
    if current.record is not None:
        record_writer.write_record(current, refresh=True)


def watcher(current: ActiveCluster, timeout: float) -> idle.IdleWatcher | None:
    """A watcher that closes ``current`` after ``timeout`` seconds without a task (0: none)."""
    if timeout <= 0:
        return None

    def changed() -> None:  # idle or busy again: the record shows the time left
        if current.record is not None:
            record_writer.write_record(current, refresh=True)

    return idle.IdleWatcher(current.client, timeout, lambda: _close_idle(current), changed)


def _close_idle(watched: ActiveCluster) -> None:
    """The idle watcher's end (on its thread): close the cluster it watched (if still in use) and say so."""

    def claim() -> float | None:  # on the owner: stop() must not wait for the thread that calls this
        if kernel_cluster.in_use() is not watched or watched.idle is None:
            return None
        waited, watched.idle = watched.idle.timeout, None
        return waited

    waited = owner.change(claim)
    if waited is None or stop(only=watched) == NO_CLUSTER:
        return
    print(idle.closed_line(PROG, watched.owned, watched.options.address or watched.name, waited))
