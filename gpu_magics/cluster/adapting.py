"""``%gpucluster adapt MIN MAX``: the cluster in use grows when tasks wait and shrinks when idle, through its
manager's own ``adapt()`` (SLURM jobs leave the queue, an adopted manager gives its workers back) or, for a
cluster started here, distributed's ``Adaptive`` on it."""

from __future__ import annotations

from IPython.core.error import UsageError

from gpu_magics.cluster.active import ActiveCluster
from gpu_magics.cluster.inspection import one_line
from gpu_magics.cluster.options import PROG


def adapt(current: ActiveCluster, minimum: int, maximum: int) -> str:
    """Have ``current`` adapt between ``minimum`` and ``maximum`` workers; says so in one line."""
    if current.kind == "gpu" and maximum > len(current.gpu_ids):
        raise UsageError(
            f"{PROG} adapt: the cluster may use {len(current.gpu_ids)} GPU(s), one worker each; give at most "
            f"{len(current.gpu_ids)}"
        )
    try:
        if current.manager is not None:
            current.manager.adapt(minimum, maximum)
        else:
            assert current.cluster is not None
            current.cluster.adapt(minimum=minimum, maximum=maximum)
            current.adaptive = (minimum, maximum)
    except Exception as error:
        raise UsageError(f"{PROG} adapt: {one_line(error)}") from None
    return f"{PROG}: {current.name!r} adapts between {minimum} and {maximum} workers"
