"""In the kernel: what happens to the cluster from outside a verb: the kernel's shutdown, an interrupt, the idle
reclaim asked by the server."""
