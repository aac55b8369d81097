"""The worker processes and what starts them. ``forkserver`` runs in the kernel and launches the server the
workers fork from; ``forkserver_preload`` runs in that server only; ``warmup``'s plugin runs in each worker
(started from the kernel, which also prepares itself meanwhile); ``kernel_context`` runs in the kernel, before GPU
workers start, to say what GPU memory the kernel already holds on their GPUs; ``driver_start`` launches, from the
kernel, the process that starts the CUDA driver on the host's GPUs ahead of the workers."""
