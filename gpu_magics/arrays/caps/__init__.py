"""A memory cap per notebook: what the cap is (``cap``), how one process keeps within its share through its
allocators' own limits (``allocators``), the kernel's side (``notebook``: the server's cap, the user's lower one,
the shares of the kernel, the cluster's workers and the SPMD ranks), the workers' side (``worker_plugin``) and the
one line a cell that would pass it fails with (``over_cap``)."""
