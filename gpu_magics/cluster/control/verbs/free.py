"""``%gpucluster free``: the workers give back what their pools cache on their GPUs (a parked cluster resumes
first: ``FreeAsked``)."""

from __future__ import annotations

from gpu_magics.cluster.control.answers import require_active
from gpu_magics.cluster.control.machine import events
from gpu_magics.cluster.control.verbs import resume
from gpu_magics.cluster.options import PROG
from gpu_magics.text.errors import ServiceError
from gpu_magics.text.units import dropped, one_line


def free_workers() -> tuple[int, int, list[str]]:
    """Have every worker of the cluster in use give back what its pool caches on its GPU: (bytes released,
    workers that answered, why some memory stays); ``NoCluster`` without a cluster."""
    from gpu_magics.cluster.telemetry.pools import free_workers as free_on_workers

    current = require_active("free")
    resume.asking_workers(events.FreeAsked(current), "free")
    client = current.client
    try:
        return free_on_workers(client)
    except (OSError, RuntimeError, AttributeError) as error:  # the scheduler silent or gone, the loop or client closed
        dropped("freeing the workers' memory", error)  # (a worker's own failure comes back as its answer)
        raise ServiceError(f"{PROG} free: the workers did not answer ({one_line(error)})") from None
