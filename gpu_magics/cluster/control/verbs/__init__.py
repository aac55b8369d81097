"""In the kernel: what acts on the cluster in use besides the lifecycle's own verbs: parking its workers and
resuming them (``parking``), the kernel's shutdown, an interrupted cell's tasks, the idle reclaim the server asks
for."""
