"""Rewrites of a cell's dask graph for a cluster, and the functions the rewritten tasks call.

Where the code runs: ``tuning`` and ``remote_gpus`` optimize graphs where dask materializes them (the
scheduler's process, for a distributed client); ``device`` runs inside the workers' tasks. All three are
imported by those processes by name, so the workers and the scheduler need this package installed.
"""
