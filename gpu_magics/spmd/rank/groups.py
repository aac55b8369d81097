"""Process groups made in a rank process, once, from the rank environment the host set (``RANK``, ``WORLD_SIZE``,
``MASTER_ADDR``/``MASTER_PORT``, ``JAX_COORDINATOR_ADDRESS``), with explicit arguments and a timeout of minutes.

A GPU rank (``GPU_MAGICS_SPMD_DEVICE=gpu``) gets NCCL and its own device (``LOCAL_RANK``: the host listed its
ranks' GPUs in local-rank order in ``CUDA_VISIBLE_DEVICES``); a CPU rank gets gloo. Returns one line that says
what was made, or that it already exists.
"""

from __future__ import annotations

import datetime
import os
from typing import Any

KINDS = ("torch", "jax")


def _env_int(name: str) -> int:
    return int(os.environ[name])


def gpu_rank() -> bool:
    return os.environ.get("GPU_MAGICS_SPMD_DEVICE") == "gpu"


def initialize(kind: str, timeout_s: float, remake: bool = False) -> str:
    if kind == "torch":
        return init_torch(timeout_s, remake)
    if kind == "jax":
        return init_jax(timeout_s)
    raise ValueError(f"unknown group kind {kind!r}; choose one of {', '.join(KINDS)}")


def init_torch(timeout_s: float, remake: bool = False) -> str:
    """The torch group (``remake``: the last one was aborted or fell out of step: end it, make it again)."""
    import torch
    import torch.distributed as dist

    from gpu_magics.spmd.rank import collectives

    if remake:
        collectives.end_for_remake()
    if dist.is_initialized():
        return f"torch.distributed: {dist.get_backend()} group of {dist.get_world_size()} (kept)"
    kwargs: dict[str, Any] = {}
    if gpu_rank():
        local = _env_int("LOCAL_RANK")
        torch.cuda.set_device(local)
        kwargs["device_id"] = torch.device(f"cuda:{local}")
        backend = "nccl"
    else:
        backend = "gloo"
    dist.init_process_group(
        backend,
        init_method=f"tcp://{os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}",
        rank=_env_int("RANK"),
        world_size=_env_int("WORLD_SIZE"),
        timeout=datetime.timedelta(seconds=timeout_s),
        **kwargs,
    )
    return f"torch.distributed: {backend} group of {dist.get_world_size()}" + (" made again" if remake else "")


def init_jax(timeout_s: float) -> str:
    import jax

    if _jax_initialized(jax):
        return f"jax.distributed: {jax.process_count()} processes (kept)"
    kwargs: dict[str, Any] = {}
    if gpu_rank():
        kwargs["local_device_ids"] = [_env_int("LOCAL_RANK")]
    else:
        jax.config.update("jax_platforms", "cpu")
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(
        coordinator_address=os.environ["JAX_COORDINATOR_ADDRESS"],
        num_processes=_env_int("WORLD_SIZE"),
        process_id=_env_int("RANK"),
        initialization_timeout=max(1, int(timeout_s)),
        **kwargs,
    )
    said = f"jax.distributed: {jax.process_count()} processes, {jax.device_count()} devices"
    if "XLA_PYTHON_CLIENT_PREALLOCATE" in os.environ.get("GPU_MAGICS_SPMD_DEFAULTED", "").split(","):
        said += (
            "; XLA_PYTHON_CLIENT_PREALLOCATE=false: JAX takes GPU memory as it needs it, leaving room for the "
            "Dask worker on the same GPU (%env XLA_PYTHON_CLIENT_PREALLOCATE=true, then --reset, to preallocate)"
        )
    return said


def _jax_initialized(jax: Any) -> bool:
    try:
        from jax._src import distributed as state

        return state.global_state.client is not None
    except (ImportError, AttributeError):  # a JAX without this module or state
        return False
