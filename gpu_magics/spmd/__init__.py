"""SPMD ranks: ``%%gpurun spmd`` runs a cell once on every worker of the cluster at the same time, one rank
process per worker, with the environment that ``torch.distributed`` and JAX expect.

Three rooms, one per process: ``kernel/`` (the world of ranks, the cell's run, its output and results) runs in
the notebook's kernel; ``worker/`` (the rank host: starts, feeds and stops the rank process) runs in each Dask
worker; ``rank/`` (a small REPL that keeps the rank's variables) runs in the rank process, a child of the worker.
The kernel reaches the workers through the cluster's ``Client``, and a cell's commands on ``channel`` (one TCP
connection per rank, opened by its worker with a token the kernel gets through the ``Client``).
"""

from __future__ import annotations

from gpu_magics.spmd.kernel.data.transfer import pull, push
from gpu_magics.spmd.rank.shards import shards

__all__ = ["pull", "push", "shards"]
