"""In the Jupyter server process: ``GpuMagicsServer.idle_reclaim_min`` (off by default). Once a kernel's GPU memory
has sat on idle GPUs that long (``gpu_magics_kernel_idle_hold_seconds``), the server asks the kernel, between cells,
to give back what it caches and to close its cluster where that loses nothing of the user's, or with
``idle_reclaim_park`` to park its GPU workers, their data kept (``cluster.control.verbs.reclaim`` decides, in the
kernel); the kernel says what it did at the top of its next cell, and ``/metrics`` counts it
(``gpu_magics_idle_reclaims_total``). A kernel is never ended.
"""
