"""The cluster this kernel uses and what it learnt about it: the data the control keeps of a running cluster, and
what every reader of it (status, the record, the views) reads. Only the control (``cluster.control``) makes one and
changes it, on its owner thread."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpu_magics.cluster.background.idle import IdleWatcher
from gpu_magics.cluster.options import ClusterOptions, Kind
from gpu_magics.cluster.records.record import ClusterRecord
from gpu_magics.cluster.records.refresh import RecordRefresher
from gpu_magics.cluster.telemetry.collector import ClusterTelemetry

if TYPE_CHECKING:
    from distributed import Client, LocalCluster

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
