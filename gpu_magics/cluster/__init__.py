"""The ``%gpucluster`` engine: options, lifecycle, cluster factories, warm-up, worker processes, cluster info
as plain data and the discovery records the server reads. Importing this package imports nothing else: the
server imports ``records`` without IPython or distributed."""
