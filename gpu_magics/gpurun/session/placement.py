"""Where dask work of plain cells runs as the session stands, in words: for ``%gpurun`` alone, the line of
``%gpucluster``'s output, the side panel's card and the array display. Reads only what the kernel knows (no
round trip beyond the client's cached worker list, no GPU call beyond the inventory).
"""

from __future__ import annotations

from dataclasses import dataclass

import dask

from gpu_magics import gpus
from gpu_magics.gpurun.backends import BackendPlan

SESSION_SETTING = "%config ClusterMagics.plain_cells_on_cluster = True"


@dataclass(frozen=True)
class Placement:
    """Where plain cells' dask work runs, and the one command that puts it on the GPUs (or tuned path)."""

    where: str  # "the cluster's workers, NumPy chunks on their CPUs"
    fix: str | None = None  # "%gpurun multi-gpu puts them on the cluster's GPUs"
    gpus_idle: bool = False  # GPUs that could run the work sit idle

    def line(self) -> str:
        """``plain cells: <where>; <fix>``."""
        return f"plain cells: {self.where}" + (f"; {self.fix}" if self.fix else "")


OFF = "%gpurun off goes back to dask's own settings"
NO_GPU_WORKER = "the cluster has no GPU worker"  # a multi-gpu plan's note on a CPU cluster


def off_line(ended: str | None) -> str:
    """What ``%gpurun off`` says: that ``ended`` (the session backend it ended, if any) is off, and where plain
    cells run now."""
    where = plain_cells(None).where
    if ended is None:
        return f"%gpurun: plain cells run with dask's own settings: {where}"
    return f"%gpurun: plain cells no longer use {ended}: {where}"


def session_line(plan: BackendPlan) -> str:
    """What ``%gpurun BACKEND`` says: one line of about 100 characters (``"%gpurun: plain cells now use multi-gpu:
    CuPy chunks on 4x NVIDIA H200 (4 workers); %gpurun off ends it"``), then the plan's notes, one a line."""
    chunks = "CuPy" if plan.chunk_type == "cupy" else "NumPy"
    where = f"{chunks} chunks on {plan.hardware}"
    if plan.client is None and plan.chunk_type == "numpy":
        where += " here"
    if NO_GPU_WORKER in plan.notes and "CPU worker" not in plan.hardware:
        where += " (no GPU worker)"
    notes = [note for note in plan.notes if note != NO_GPU_WORKER]
    return "\n".join(
        [f"%gpurun: plain cells now use {plan.name}: {where}; %gpurun off ends it", *(f"  {n}" for n in notes)]
    )


def plain_cells(plan: BackendPlan | None) -> Placement:
    """Where plain cells run under the session backend ``plan`` (``None``: dask's own settings)."""
    if plan is not None:
        return Placement(f"{plan.name}, {_plan_where(plan, plan.chunk_type)}", OFF)
    from gpu_magics.cluster.control import queries

    backend = str(dask.config.get("array.backend", default="numpy") or "numpy")
    if queries.active_client() is not None:
        with_gpu, without_gpu = queries.split_workers_by_gpu()
        if with_gpu and backend == "cupy":
            return Placement(
                "the cluster's GPUs with dask's own graph (CuPy chunks)", "%gpurun multi-gpu runs the tuned graph"
            )
        if with_gpu:
            return Placement(
                "NumPy chunks on the workers' CPUs, the GPUs idle",
                f"%gpurun multi-gpu puts them on the GPUs (always: {SESSION_SETTING})",
                gpus_idle=True,
            )
        if without_gpu:
            return Placement(
                "the cluster's CPU workers with dask's own graph", "%gpurun multi-gpu runs the tuned graph"
            )
        return Placement("the cluster (it has no workers yet)")
    if backend == "cupy":
        return Placement("this kernel's GPU with dask's own graph (CuPy chunks)", "%gpurun gpu runs the tuned graph")
    if gpus.inventory().unavailable_reason() is None:
        return Placement(
            "this kernel's CPU threads (NumPy chunks), the GPU idle", "%gpurun gpu puts them on GPU 0", True
        )
    return Placement("this kernel's CPU threads (NumPy chunks)")


def for_array(plan: BackendPlan | None, chunk_library: str) -> Placement | None:
    """Where an array whose chunks are of ``chunk_library`` (``numpy``/``cupy``) is computed in the session as it
    stands, with the fix when GPUs would sit idle; ``None`` for other chunk types."""
    if chunk_library not in ("numpy", "cupy"):
        return None
    if plan is not None:
        where = _plan_where(plan, chunk_library)
        if chunk_library == "numpy" and plan.chunk_type == "cupy" and not plan.remote_chunks:
            return Placement(where, 'x = x.to_backend("cupy") computes it on the GPUs', gpus_idle=True)
        return Placement(where)
    from gpu_magics.cluster.control import queries

    if queries.active_client() is None:
        return Placement("this kernel's GPU" if chunk_library == "cupy" else "this kernel's CPU threads")
    with_gpu, _ = queries.split_workers_by_gpu()
    if chunk_library == "cupy":
        return Placement("the cluster's GPUs")
    if with_gpu:
        return Placement(
            "the cluster workers' CPUs, the GPUs idle", 'x = x.to_backend("cupy") computes it on the GPUs', True
        )
    return Placement("the cluster's CPU workers")


def _plan_where(plan: BackendPlan, chunk_library: str) -> str:
    """``plan``'s hardware for chunks of ``chunk_library``: NumPy chunks on a GPU backend run on the CPUs beside it."""
    if plan.client is not None:
        if plan.remote_chunks:
            return f"CuPy chunks made on the cluster's GPUs ({plan.hardware}), results as NumPy here"
        if chunk_library == "cupy":
            return f"CuPy chunks on the cluster's GPUs ({plan.hardware})"
        on = "the cluster workers' CPUs" if plan.chunk_type == "cupy" else f"the cluster ({plan.hardware})"
        return f"NumPy chunks on {on}"
    if chunk_library == "cupy":
        return f"CuPy chunks on {plan.hardware}" if plan.gpu_indices else "CuPy chunks on this kernel's GPU"
    if plan.chunk_type == "numpy":
        return f"NumPy chunks on this kernel's CPU threads ({plan.hardware})"
    return "NumPy chunks on this kernel's CPU threads"
