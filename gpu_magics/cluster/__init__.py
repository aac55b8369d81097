"""The ``%gpucluster`` engine, in the kernel: options, lifecycle (start, attach, scale, restart, stop), the
queries ``gpurun`` asks (``queries``), cluster factories, inspection, interrupts and shutdown. Its sub-packages
say where their code runs: ``workers/`` (the worker processes and what starts them), ``telemetry/`` (the
workers' GPU reports), ``records/`` (what the kernel writes about its cluster: the record the server reads, the
status ``%gpucluster`` shows), ``dashboard/`` (dashboard links and closing).

Importing this package (or a sub-package) imports nothing else: the server imports ``records.record`` without
IPython or distributed."""
