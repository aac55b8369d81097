"""The environment a rank process starts with, beyond the world's (``RANK``, ``WORLD_SIZE`` ...): defaults that
leave room on a GPU the rank shares with its Dask worker, and GPU numbers that every library can read. A value
the user set (in the kernel, passed on, or in the worker's environment) always wins."""

from __future__ import annotations

import os
from collections.abc import Callable

GPU_DEFAULTS = {"XLA_PYTHON_CLIENT_PREALLOCATE": "false"}  # JAX would take 75% of a GPU its worker uses too
DEFAULTED = "GPU_MAGICS_SPMD_DEFAULTED"  # the names set here, for the rank to say so once
RANK_ENV = "GPU_MAGICS_SPMD_ENV"  # the names of the rank's environment, which its REPL puts back before each cell


def with_defaults(env: dict[str, str]) -> dict[str, str]:
    """``env`` with ``GPU_DEFAULTS`` for a GPU rank, where neither the kernel (in ``env``) nor this worker's own
    environment set them: a value the user set wins. (torch's flight recorder, which names a stalled rank's
    collective, is on by default in the torch releases that have it: nothing is set for it.)"""
    if env.get("GPU_MAGICS_SPMD_DEVICE") != "gpu":
        return env
    added = {name: value for name, value in GPU_DEFAULTS.items() if name not in env and name not in os.environ}
    return {**env, **added, DEFAULTED: ",".join(added)} if added else env


def torchrun_defaults(env: dict[str, str]) -> dict[str, str]:
    """``env`` with what torchrun's launcher gives its workers from its own environment, here the worker's:
    ``TORCH_NCCL_ASYNC_ERROR_HANDLING=1`` (a failed or timed-out NCCL collective ends the rank rather than leaving
    it hung) and, where a host runs more than one rank, ``OMP_NUM_THREADS=1``; a value the kernel passed on (in
    ``env``) or the worker has wins."""
    wanted = {"TORCH_NCCL_ASYNC_ERROR_HANDLING": "1"}
    if int(env.get("LOCAL_WORLD_SIZE", "1") or "1") > 1:
        wanted["OMP_NUM_THREADS"] = "1"
    added = {name: value for name, value in wanted.items() if name not in env}
    return {**env, **{name: os.environ.get(name, value) for name, value in added.items()}}


def numbered_devices(env: dict[str, str], index_of: Callable[[str], int | None] | None = None) -> dict[str, str]:
    """A GPU rank's ``CUDA_VISIBLE_DEVICES`` as NVML's numbers where it names its GPUs by UUID (DeepSpeed, among
    others, reads it as integers), with ``CUDA_DEVICE_ORDER=PCI_BUS_ID`` so that CUDA numbers them as NVML does;
    unchanged where any GPU does not map, a MIG slice is named, or the user chose another order."""
    entries = [entry for entry in env.get("CUDA_VISIBLE_DEVICES", "").split(",") if entry]
    if env.get("GPU_MAGICS_SPMD_DEVICE") != "gpu" or not entries or all(entry.isdigit() for entry in entries):
        return env
    order = env.get("CUDA_DEVICE_ORDER", os.environ.get("CUDA_DEVICE_ORDER", "PCI_BUS_ID"))
    if order != "PCI_BUS_ID" or not all(entry.startswith("GPU-") for entry in entries):
        return env
    lookup = index_of or nvml_numbers().get  # one read of NVML for every GPU the rank lists
    indices = [lookup(entry) for entry in entries]
    if any(index is None for index in indices):
        return env
    return {**env, "CUDA_VISIBLE_DEVICES": ",".join(map(str, indices)), "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}


def nvml_numbers() -> dict[str, int]:
    """UUID -> NVML's number, for every GPU NVML sees (empty where it sees none)."""
    from gpu_magics.monitor.nvml import NvmlSource

    source = NvmlSource(visible_devices=None)
    try:
        readings, _ = source.read(slow=False)
    finally:
        source.close()
    return {reading.uuid: reading.nvml_index for reading in readings if reading.nvml_index is not None}
