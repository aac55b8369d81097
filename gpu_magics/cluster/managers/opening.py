"""Making the ``ClusterManager`` a ``%gpucluster`` line asks for: a cluster started here (GPU or CPU workers), a
scheduler to attach to (``--address``), SLURM jobs (``--slurm``), the user's object (``--from NAME``) or a Dask
Gateway's cluster (``--gateway``). Making one does nothing else: its ``open`` checks the line, its ``start``
starts."""

from __future__ import annotations

from typing import Any

from gpu_magics.cluster.managers.base import ClusterManager
from gpu_magics.cluster.options import ClusterOptions


def make_manager(options: ClusterOptions, namespace: dict[str, Any]) -> ClusterManager:
    """The manager for ``options`` (``--from`` looks its name up in ``namespace`` when it opens)."""
    if options.kind in ("gpu", "cpu"):
        from gpu_magics.cluster.managers.local import LocalManager

        return LocalManager(options)
    if options.kind == "attached":
        from gpu_magics.cluster.managers.attached import AttachedManager

        assert options.address is not None
        return AttachedManager(options.address)
    if options.kind == "gateway":
        from gpu_magics.cluster.managers.gateway import GatewayManager

        return GatewayManager(options)
    if options.from_name is not None:
        from gpu_magics.cluster.managers.adopted import AdoptedManager

        return AdoptedManager(None, None, options.from_name, namespace)
    from gpu_magics.cluster.managers.slurm import SlurmManager

    return SlurmManager(options)
