"""Runs in the notebook's kernel: what a ``%%gpurun`` cell shows while it runs: the live panel with its GPUs'
figures and its progress, what an interrupt shows, and the line for a cluster that went away meanwhile."""
