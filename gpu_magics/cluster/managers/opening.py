"""Making the ``ClusterManager`` a ``%gpucluster`` line asks for: SLURM jobs (``--slurm``) or the user's object
(``--from NAME``)."""

from __future__ import annotations

from typing import Any

from gpu_magics.cluster.managers.base import ClusterManager
from gpu_magics.cluster.options import ClusterOptions


def open_manager(options: ClusterOptions, namespace: dict[str, Any]) -> ClusterManager:
    """The manager for ``options`` (``--from`` looks its name up in ``namespace``); one-line ``UsageError``s."""
    if options.from_name is not None:
        from gpu_magics.cluster.managers.adopted import adopt

        return adopt(options.from_name, namespace)
    from gpu_magics.cluster.managers import slurm

    return slurm.start(options)
