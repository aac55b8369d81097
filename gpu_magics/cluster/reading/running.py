"""The cluster this kernel uses and what it learnt about it: the data the control keeps of a running cluster, and
what every reader of it (status, the record, the views) reads. Only the control (``cluster.control``) makes one and
changes it, on its owner thread."""

from __future__ import annotations

import enum
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol, cast

from gpu_magics.cluster.background.idle import IdleWatcher
from gpu_magics.cluster.info import ClusterFacts
from gpu_magics.cluster.options import ClusterOptions, Kind
from gpu_magics.cluster.records.record import ClusterRecord
from gpu_magics.cluster.records.refresh import RecordRefresher
from gpu_magics.cluster.telemetry.collector import ClusterTelemetry

if TYPE_CHECKING:
    from distributed import Client, LocalCluster

    from gpu_magics.cluster.managers.base import ClusterManager


WorkersKind = Literal["gpu", "cpu", "unknown"]


@dataclass(frozen=True)
class Figures:
    """What a start, restart or scale learnt of the workers: replaced whole by the control's owner, never written
    in part from another thread."""

    devices: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)  # worker name -> what it said and saw
    ready_s: float | None = None  # from the magic's start until the workers answered
    warm_s: float | None = None  # from then until they were warm


class ParkWatch(Protocol):
    """What parks the cluster after ``after_s`` seconds without a task (``control.verbs.park.IdlePark``)."""

    after_s: float

    def arm(self) -> None:
        """Watch from now on (a watch under way is replaced)."""

    def again(self) -> None:
        """Watch again from now on, unless stopped meanwhile."""

    def stop(self) -> None:
        """Watch no more."""

    def left(self) -> float | None:
        """Seconds until it parks the cluster if it stays idle (``None``: a task runs, or it watches no more)."""


class Service(Protocol):
    """What runs beside a cluster in use while it is (a watch, a refresher, the telemetry's listener): it stops when
    the cluster is let go."""

    def stop(self) -> None:
        """Run no more (an attached cluster's telemetry plugin stays: other kernels may listen to it)."""


class Role(enum.Enum):
    """What a service does beside the cluster; the order is the order they are let go."""

    IDLE_TIMEOUT = "the idle timeout's watch"  # an ``IdleWatcher``
    IDLE_PARK = "the idle park's watch"  # a ``ParkWatch``
    RECORD_REFRESH = "the record's refresher"  # a ``RecordRefresher``
    TELEMETRY = "the telemetry's listener"  # a ``ClusterTelemetry``


@dataclass(frozen=True)
class Parked:
    """What a park holds: each worker's process (name → pid), the GPU memory given back, when, and the SPMD ranks'
    processes parked with them (``rank 0`` → pid; this kernel's own context: ``control.kernel_park``)."""

    processes: dict[str, int]
    released: int
    since: float
    ranks: dict[str, int] = field(default_factory=dict)
    comes_back: dict[str, int] = field(default_factory=dict)  # GPU UUID -> what the driver restores there

    @property
    def all_processes(self) -> dict[str, int]:
        """The workers' and the ranks' processes (what a resume restores)."""
        return {**self.processes, **self.ranks}


@dataclass
class ActiveCluster:
    """The cluster this kernel uses, and what was learnt about it."""

    name: str
    kind: Kind  # how the line asked for it: the record's field (what it is, its manager says: ``facts``)
    options: ClusterOptions
    client: Client
    manager: ClusterManager  # what gives the workers (managers/: local, attached, SLURM, gateway, --from)
    cluster: LocalCluster | None = None  # started here (LocalCluster, LocalCUDACluster); None otherwise
    gpu_ids: tuple[str, ...] = ()  # CUDA devices given to the workers (GPU clusters)
    figures: Figures = field(default_factory=Figures)
    started_at: float = field(default_factory=time.time)
    record_path: Path | None = None
    record: ClusterRecord | None = None  # the last record written
    saved_config: dict[str, Any] | None = None  # dask settings to put back when the cluster closes
    plain_cells: str | None = None  # the session backend plain cells run on here (``%gpurun multi-gpu``), if any
    parked: Parked | None = None  # while its workers are parked: what the park holds
    attached: dict[Role, Service] = field(default_factory=dict)  # what runs beside it: the machine's rows alone
    # attach and detach them (``SchedulerAnswered``, ``SwapService``, a stop), and say which to stop

    def services(self) -> list[Service]:
        """What runs beside it, in the order it is let go (``Role``'s order)."""
        return [self.attached[role] for role in Role if role in self.attached]

    @property
    def idle(self) -> IdleWatcher | None:
        """Closes it (attached: detaches) after a while without a task."""
        return cast("IdleWatcher | None", self.attached.get(Role.IDLE_TIMEOUT))

    @property
    def idle_park(self) -> ParkWatch | None:
        """Parks it after a while without a task, if asked."""
        return cast("ParkWatch | None", self.attached.get(Role.IDLE_PARK))

    @property
    def refresher(self) -> RecordRefresher | None:
        """Rewrites the record as the workers report."""
        return cast("RecordRefresher | None", self.attached.get(Role.RECORD_REFRESH))

    @property
    def telemetry(self) -> ClusterTelemetry | None:
        """The workers' own GPU reports."""
        return cast("ClusterTelemetry | None", self.attached.get(Role.TELEMETRY))

    @property
    def devices(self) -> Mapping[str, Mapping[str, Any]]:
        return self.figures.devices

    @property
    def ready_s(self) -> float | None:
        return self.figures.ready_s

    @property
    def warm_s(self) -> float | None:
        return self.figures.warm_s

    @property
    def workers_kind(self) -> WorkersKind:
        """What the workers are, answered here only: as the manager asked for them (a GPU or a CPU cluster started
        here; ``--cpu-workers``: CPU workers on a host with GPUs too), else what they said (a GPU its chunks can use:
        CuPy there), else what they report; ``unknown`` until they said anything."""
        declared = self.manager.declared_workers
        if declared is not None:
            return declared
        if self.devices:
            return "gpu" if any(_usable_gpu(seen) for seen in self.devices.values()) else "cpu"
        reported = self.telemetry.worker_gpus() if self.telemetry is not None else {}
        return "gpu" if any(gpus for _, gpus in reported.values()) else "unknown"

    @property
    def facts(self) -> ClusterFacts:
        """What its manager says of it, for every view and every verb."""
        return self.manager.facts(self.workers_kind)

    @property
    def owned(self) -> bool:
        """Whether this kernel started the cluster (and so may restart and stop it)."""
        return self.manager.owned

    @property
    def scalable(self) -> bool:
        """Whether ``scale`` and ``adapt`` act on it: started here, or a manager object (adopted ones too)."""
        return self.manager.scalable


def _usable_gpu(seen: Mapping[str, Any]) -> bool:
    """A worker that said it has a GPU its chunks can use (no CuPy there: a CPU worker for arrays)."""
    return bool(seen.get("gpu_name")) and seen.get("cupy") is not False
