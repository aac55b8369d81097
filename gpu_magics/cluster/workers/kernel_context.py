"""Whether this process (the kernel) already holds a CUDA context, and GPU memory, on a GPU that a new cluster's
workers will use: that memory stays taken while the workers run beside it, so ``%gpucluster`` says so in one line.

Checking creates no context. Without the CUDA driver library mapped into this process there is none to find, and
nothing is called. With it, the driver tells whether each GPU's primary context is active (CuPy, PyTorch, Numba
and JAX use the primary one); NVML's list of processes on each GPU gives the memory this process holds, and
catches contexts of other kinds where NVML reports this process's own PID.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass

from gpu_magics.cluster.telemetry.process_memory import cuda_loaded, primary_contexts
from gpu_magics.gpus import GpuDevice
from gpu_magics.text.units import dropped, format_bytes


@dataclass(frozen=True)
class HeldGpu:
    """A GPU on which this process holds a context."""

    index: int  # as this process numbers it
    name: str
    memory: int | None  # bytes this process holds there (None: NVML did not say)


def held_message(held: Sequence[HeldGpu], prog: str = "%gpucluster") -> str | None:
    """One line about the GPUs this kernel holds that the workers will use; ``None`` when it holds none."""
    if not held:
        return None
    parts = []
    for gpu in held:
        memory = f", {format_bytes(gpu.memory)} held" if gpu.memory is not None else ""
        parts.append(f"GPU {gpu.index} ({gpu.name}{memory})")
    which = "a worker" if len(held) == 1 else "workers"
    return (
        f"{prog}: this kernel already holds a CUDA context on {', '.join(parts)}, which {which} will use too: "
        "what the kernel keeps there is not the workers' (free arrays you no longer need, or restart the kernel "
        "to release it all)"
    )


def find_held(
    gpu_ids: Collection[str],
    devices: Sequence[GpuDevice],
    *,
    loaded: Callable[[], bool] | None = None,
    contexts: Callable[[Sequence[int]], set[int] | None] | None = None,
    memory: Callable[[int], dict[str, int | None]] | None = None,
    pid: int | None = None,
) -> list[HeldGpu]:
    """The GPUs among ``devices`` named by ``gpu_ids`` (workers' ``CUDA_VISIBLE_DEVICES`` entries) on which this
    process holds a context. ``loaded``, ``contexts`` and ``memory`` default to this process's real state."""
    targets = [device for device in devices if device.cuda_id in gpu_ids]
    if not targets or not (loaded or cuda_loaded)():
        return []
    active = (contexts or primary_contexts)([device.index for device in targets])
    if active is not None and not active:
        return []  # the driver answered: no context on any of them
    usage = (memory or process_memory)(os.getpid() if pid is None else pid)
    return [
        HeldGpu(device.index, device.name, usage.get(device.uuid))
        for device in targets
        if (active is not None and device.index in active) or device.uuid in usage
    ]


def report(gpu_ids: Collection[str], prog: str = "%gpucluster") -> None:
    """Print the line about held GPUs, if any, to stderr; a check that fails says nothing."""
    try:
        from gpu_magics import gpus

        message = held_message(find_held(gpu_ids, gpus.inventory().devices()), prog)
    except Exception as error:  # a check that fails any way says nothing: the start goes on
        dropped("checking the GPU memory the kernel holds", error)
        return
    if message is not None:
        print(message, file=sys.stderr)


def process_memory(pid: int) -> dict[str, int | None]:
    """GPU UUID -> bytes that process ``pid`` holds there, for each GPU where NVML lists it: NVML's process lists
    alone where the source reads them apart (a full read also waits on each GPU's PCIe counters, 20 ms each)."""
    return processes_memory([pid])[pid]


def processes_memory(pids: Iterable[int]) -> dict[int, dict[str, int | None]]:
    """``process_memory`` for each of ``pids``, from one read of NVML's process lists."""
    from gpu_magics.monitor.models import process_lists
    from gpu_magics.monitor.sources import default_source

    found: dict[int, dict[str, int | None]] = {pid: {} for pid in pids}
    source = default_source()
    try:
        by_uuid = process_lists(source)
    finally:
        source.close()
    for uuid, processes in by_uuid.items():
        for process in processes or ():
            if process.pid in found:
                found[process.pid][uuid] = process.used_memory
    return found
