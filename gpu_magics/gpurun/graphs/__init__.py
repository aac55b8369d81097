"""Rewrites of a cell's dask graph for a cluster, and the functions the rewritten tasks call.

Where the code runs: ``tuning`` (with ``grouping`` and ``folding``) and ``remote_gpus`` optimize graphs where dask
materializes them: the scheduler's process for a distributed client, or the kernel for the small reductions
``kernel_tail`` computes the aggregate of there. ``device`` and the runs' functions run inside the workers' tasks.
They are imported by those processes by name, so the workers and the scheduler need this package installed.
"""
