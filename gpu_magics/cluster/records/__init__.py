"""What the kernel writes about its cluster, all in the kernel. ``record`` is the contract with the Jupyter
server (which imports it, and only it, to read the records); ``writer`` writes the record and ``refresh``
rewrites it as the workers report (what ``%gpucluster`` shows is read in ``reading.cluster_state``)."""
