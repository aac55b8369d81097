"""Runs in each Dask worker process: the rank host, which starts the worker's rank process, hands it the cells,
forwards its output to the kernel and stops it. Reached from the kernel through ``Client.run``."""
