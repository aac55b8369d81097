"""Runs in the Jupyter server: which kernel owns what: the server's kernels (their process ids, the notebooks they
run for, the clusters they hold) and the GPU processes mapped to the kernel that owns them."""
