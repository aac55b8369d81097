"""Making the ``ClusterManager`` a ``%gpucluster`` line asks for: a cluster started here (GPU or CPU workers, or
one worker per simulated GPU), a scheduler to attach to (``--address``), SLURM jobs (``--slurm``), the user's object
(``--from NAME``) or a Dask Gateway's cluster (``--gateway``). Making one does nothing else: its ``open`` checks the
line, its ``start`` starts. Where a cluster is up, a line that names another is refused (``refuse_another``)."""

from __future__ import annotations

from typing import Any

from gpu_magics.cluster.managers.base import ClusterManager
from gpu_magics.cluster.options import PROG, ClusterOptions
from gpu_magics.text.errors import LineError

# the options that choose a cluster: a line with none of them (``%gpucluster``, ``--name N``) names whatever runs
CHOOSING = frozenset({"gpus", "cpu_workers", "address", "from_name", "gateway", "slurm", "connect_name"})


def make_manager(options: ClusterOptions, namespace: dict[str, Any]) -> ClusterManager:
    """The manager for ``options`` (``--from`` looks its name up in ``namespace`` when it opens)."""
    if options.kind == "gpu":
        from gpu_magics.cluster.managers.local import simulated
        from gpu_magics.cluster.managers.local.gpu import LocalGpuManager

        if simulated.simulated():  # one worker per simulated GPU: parking can be tried without a GPU
            return simulated.SimulatedGpuManager(options)

        return LocalGpuManager(options)
    if options.kind == "cpu":
        from gpu_magics.cluster.managers.local.cpu import LocalCpuManager

        return LocalCpuManager(options)
    if options.kind == "attached":
        from gpu_magics.cluster.managers.attached import AttachedManager

        assert options.address is not None
        return AttachedManager(options.address, options.start_timeout)
    if options.kind == "gateway":
        from gpu_magics.cluster.managers.gateway.manager import GatewayManager

        return GatewayManager(options)
    if options.from_name is not None:
        from gpu_magics.cluster.managers.adopted import AdoptedManager

        return AdoptedManager(None, None, options.from_name, namespace)
    from gpu_magics.cluster.managers.slurm.manager import SlurmManager

    return SlurmManager(options)


def refuse_another(
    manager: ClusterManager, options: ClusterOptions, running: ClusterManager | None, address: str | None, name: str
) -> None:
    """A one-line ``LineError`` (after ``manager`` lets go of what it opened) where the line names a cluster other
    than ``name``, the one in use or starting (its manager ``running``; ``address``: its scheduler's, if known)."""
    if not options.given & CHOOSING or manager.same_as(running, address):
        return
    manager.finish(name, keep=True)
    raise LineError(
        f"{PROG} {_asked(options)}: cluster {name!r} is up; to switch, run {PROG} stop first or add --replace"
    )


def _asked(options: ClusterOptions) -> str:
    """The options that choose the line's cluster, as the line gave them."""
    if options.address is not None:
        return f"--address {options.address}"
    if options.from_name is not None:
        return f"--from {options.from_name}"
    if options.gateway is not None:
        connect = f" --connect {options.gateway.connect_name}" if options.gateway.connect_name is not None else ""
        return f"--gateway{' ' + options.gateway.address if options.gateway.address else ''}{connect}"
    if options.slurm is not None:
        return "--slurm"
    if options.cpu_workers is not None:
        return f"--cpu-workers {options.cpu_workers}"
    gpus = options.local.gpus
    return "--gpus " + ",".join(str(gpu) for gpu in gpus) if gpus else "--gpus"
