"""Which GPUs a ``%gpucluster`` start on this machine gives its workers (``--gpus``), checked against the visible
ones; every mistake one ``UsageError`` line."""

from __future__ import annotations

from IPython.core.error import UsageError

from gpu_magics import gpus
from gpu_magics.cluster.options import PROG


def choose_gpus(indices: tuple[int, ...] | None) -> tuple[str, ...]:
    """The ``CUDA_VISIBLE_DEVICES`` entries of the chosen GPUs (all visible ones by default)."""
    inventory = gpus.inventory()
    visible = inventory.devices()
    if not visible:
        raise UsageError(
            f"{PROG}: no GPU is visible on this machine; use {PROG} --cpu-workers N for CPU workers, "
            f"or {PROG} --address tcp://host:port to attach to a scheduler"
        )
    if inventory.simulated:
        raise UsageError(
            f"{PROG}: {gpus.simulated_reason(len(visible), None)}; use {PROG} --cpu-workers N for CPU workers"
        )
    if indices is None:
        return tuple(device.cuda_id for device in visible)
    missing = [index for index in indices if index >= len(visible)]
    if missing:
        names = ", ".join(str(index) for index in range(len(visible)))
        raise UsageError(
            f"{PROG} --gpus {','.join(map(str, indices))}: no GPU {','.join(map(str, missing))} here; "
            f"the {len(visible)} visible GPU(s) are {names}"
        )
    return tuple(visible[index].cuda_id for index in indices)
