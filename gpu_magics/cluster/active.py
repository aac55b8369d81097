"""The cluster a kernel uses and what it learnt about it: plain state shared by the lifecycle's modules, and which
one is in use."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpu_magics.cluster.background import owner
from gpu_magics.cluster.background.idle import IdleWatcher
from gpu_magics.cluster.options import ClusterOptions, Kind
from gpu_magics.cluster.records.record import ClusterRecord
from gpu_magics.cluster.records.refresh import RecordRefresher
from gpu_magics.cluster.telemetry.collector import ClusterTelemetry
from gpu_magics.units import dropped

if TYPE_CHECKING:
    from distributed import Client, LocalCluster

    from gpu_magics.cluster.background.starting import Starting
    from gpu_magics.cluster.managers.base import ClusterManager


@dataclass
class ActiveCluster:
    """The cluster this kernel uses, and what was learnt about it."""

    name: str
    kind: Kind
    options: ClusterOptions
    client: Client
    cluster: LocalCluster | None  # started here (LocalCluster, LocalCUDACluster); None otherwise
    gpu_ids: tuple[str, ...] = ()  # CUDA devices given to the workers (GPU clusters)
    devices: dict[str, dict[str, Any]] = field(default_factory=dict)  # worker name -> what its warm-up saw
    started_at: float = field(default_factory=time.time)
    ready_s: float | None = None
    warm_s: float | None = None
    record_path: Path | None = None
    record: ClusterRecord | None = None  # the last record written
    saved_config: dict[str, Any] | None = None  # dask settings to put back when the cluster closes
    telemetry: ClusterTelemetry | None = None  # the workers' own GPU reports
    refresher: RecordRefresher | None = None  # rewrites the record as the workers report
    idle: IdleWatcher | None = None  # closes it (attached: detaches) after a while without a task
    plain_cells: str | None = None  # the session backend plain cells run on here (``%gpurun multi-gpu``), if any
    manager: ClusterManager | None = None  # what gives the workers (managers/: local, attached, SLURM, --from)

    @property
    def workers_kind(self) -> Kind:
        """The kind whose rules the workers follow: ``cpu`` where the line asked for CPU workers (they stay CPU
        workers on a host with GPUs), else the cluster's kind."""
        return "cpu" if self.options.cpu_workers is not None else self.kind

    @property
    def owned(self) -> bool:
        """Whether this kernel started the cluster (and so may restart and stop it)."""
        return self.manager is not None and self.manager.owned

    @property
    def scalable(self) -> bool:
        """Whether ``scale`` and ``adapt`` act on it: started here, or a manager object (adopted ones too)."""
        return self.manager is not None and self.manager.scalable


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


Listener = Callable[[ActiveCluster | None], None]
_listeners: list[Listener] = []


def on_change(listener: Listener) -> Callable[[], None]:
    """Call ``listener`` with the new cluster (``None``: none) whenever the cluster in use changes, before the
    lifecycle undoes what the old one set; returns what removes the listener."""
    _listeners.append(listener)

    def remove() -> None:
        with contextlib.suppress(ValueError):
            _listeners.remove(listener)

    return remove
