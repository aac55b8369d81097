"""In the kernel: workers from a Dask cluster manager other than the local ones, behind one interface
(``base.ClusterManager``) that ``cluster.lifecycle`` calls: SLURM jobs through dask-jobqueue (``slurm``), a Dask
Gateway's cluster (``gateway``), or any manager object the user made (``adopted``: dask-jobqueue, dask-kubernetes,
Dask Gateway, ``SpecCluster``). ``opening.make_manager`` makes one from the ``%gpucluster`` line. dask-jobqueue is
imported only when ``--slurm`` starts a cluster, dask-gateway only for ``--gateway``."""
