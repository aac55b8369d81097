"""In the kernel: a cluster from a Dask Gateway (``manager``), the requests to the gateway (``requests``), its
cluster options as the line gives them (``cluster_options``) and the user's clusters there (``listing``)."""
