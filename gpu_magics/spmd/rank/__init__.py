"""Runs in the rank process (a child of a Dask worker, started by ``spmd.worker.host``): the rank's REPL, and the
process groups (``torch.distributed``, ``jax.distributed``) made in it. Imports nothing of dask or of the kernel."""
