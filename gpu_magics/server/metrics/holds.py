"""What each kernel holds on GPUs that sit idle, for the side panel: one line with the actions that give it back
(plain data and words, no I/O)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from gpu_magics.cluster.info import started_here
from gpu_magics.server.metrics.gather import Inputs
from gpu_magics.text.units import format_age, format_bytes

FREE_COMMAND = "%gpucluster free"
STOP_COMMAND = "%gpucluster stop"


@dataclass(frozen=True)
class Hold:
    """A kernel's GPU memory (its own, its workers', its ranks') and since when it has sat on idle GPUs."""

    kernel_id: str
    since: float | None  # None: its GPUs work
    held: int  # bytes
    cached: int  # of those, cached by pools (free cached memory gives it back)
    gpus: tuple[str, ...]  # where, as every view names them: "GPU 0", "gpu-node-1 · GPU 2"
    cluster: str | None  # the cluster this kernel started (stopping it gives its workers' memory back)
    path: str | None  # its notebook

    def idle_for(self, now: float) -> float | None:
        return None if self.since is None else max(0.0, now - self.since)

    def line(self, now: float, warning_s: float) -> str | None:
        """``holds 11.5 GiB on GPU 0, idle for 32 min: free cached memory (%gpucluster free) or stop the cluster
        (%gpucluster stop)``, once idle for ``warning_s``; else ``None``."""
        idle = self.idle_for(now)
        if idle is None or idle < warning_s:
            return None
        actions = []
        if self.cached > 0:
            actions.append(f"free cached memory ({FREE_COMMAND})")
        if self.cluster is not None:
            actions.append(f"stop the cluster ({STOP_COMMAND})")
        where = ", ".join(self.gpus)
        said = f"holds {format_bytes(self.held)} on {where}, idle for {format_age(now - idle, now)}"
        return f"{said}: {' or '.join(actions)}" if actions else said

    def to_json(self, now: float, warning_s: float) -> dict[str, Any]:
        """As ``api/idle-hold`` sends it."""
        return {
            "kernel_id": self.kernel_id,
            "path": self.path,
            "held": self.held,
            "cached": self.cached,
            "gpus": list(self.gpus),
            "cluster": self.cluster,
            "idle_s": self.idle_for(now),
            "line": self.line(now, warning_s),
        }


def holds(inputs: Inputs, kernels: Iterable[str], since: Mapping[str, float | None]) -> tuple[Hold, ...]:
    """A ``Hold`` for each kernel of ``kernels`` (those whose memory counts), ``since`` as the idle tracker said."""
    wanted = set(kernels)
    held: dict[str, int] = {}
    cached: dict[str, int] = {}
    where: dict[str, set[str]] = {}
    for holding in inputs.holdings:
        holder = holding.holder
        if holder.kernel_id not in wanted or not isinstance(holder.used_memory, int) or holder.used_memory <= 0:
            continue
        kernel = holder.kernel_id
        held[kernel] = held.get(kernel, 0) + holder.used_memory
        cached[kernel] = cached.get(kernel, 0) + (holder.cached_memory or 0)
        where.setdefault(kernel, set()).add(holder.gpu_label or holder.gpu_uuid)
    clusters = {}
    for record in inputs.records:
        if record.kernel_id and started_here(record.facts, record.kind):
            clusters[record.kernel_id] = record.name
    found = []
    for kernel in sorted(held):
        gpus = tuple(sorted(where[kernel]))
        path = inputs.paths.get(kernel)
        found.append(Hold(kernel, since.get(kernel), held[kernel], cached[kernel], gpus, clusters.get(kernel), path))
    return tuple(found)
