"""Runs in the notebook's kernel: the world of ranks (who is rank 0, the environment, the GPUs), one SPMD cell's
run (live output, status rows, failures and interrupts), results, and moving values to and from the ranks."""
