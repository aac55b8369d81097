"""Runs in the notebook's kernel: what an SPMD cell shows: the ranks' lines merged, the status rows and results,
the live progress bars, and the words for a rank that makes no progress."""
