"""In the kernel: what acts on the cluster in use above the lifecycle: restart and scale under way (``changes``),
the kernel's shutdown, an interrupted cell's tasks, the idle reclaim the server asks for."""
