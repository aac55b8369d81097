"""In the kernel: every way to get workers, behind one interface (``base.ClusterManager``) that the cluster's control
calls: a cluster started here (``local``: GPU or CPU workers), a scheduler attached to (``attached``, through
``attach``), SLURM jobs through dask-jobqueue (``slurm``), a Dask Gateway's cluster (``gateway``), or any manager
object the user made (``adopted``: dask-jobqueue, dask-kubernetes, Dask Gateway, ``SpecCluster``).
``opening.make_manager`` makes one from the ``%gpucluster`` line. dask-jobqueue is imported only when ``--slurm``
starts a cluster, dask-gateway only for ``--gateway``."""
