"""The workers' GPU reports. ``plugin`` runs in each worker (it samples the worker's GPUs and sends reports);
``collector`` runs in the kernel (it receives them: live panels, summaries, the record); ``reports`` is the
message both sides share; ``process_memory`` reads the GPU memory a process holds, in the workers for their
reports and in the kernel for ``workers.kernel_context``."""
