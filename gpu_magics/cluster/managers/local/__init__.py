"""In the kernel: a cluster started here, its scheduler in this process and its workers forked from this package's
worker server: GPU workers (``gpu``: dask-cuda's ``LocalCUDACluster``) or CPU workers (``cpu``: distributed's
``LocalCluster``), on what they share (``cluster``), made by ``factories``."""
