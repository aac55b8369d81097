"""Runs in the notebook's kernel: values moved between the kernel and the ranks (``spmd.push``, ``spmd.pull``), and
a persisted dask array handed to the ranks as a handle to the chunks their own workers hold."""
