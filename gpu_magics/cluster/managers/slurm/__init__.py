"""In the kernel: workers from SLURM jobs through dask-jobqueue (``manager``, the only module that imports it),
and SLURM's own commands, each bounded (``squeue``, the only module that runs them)."""
