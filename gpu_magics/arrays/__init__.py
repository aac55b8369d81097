"""How dask arrays run on GPUs, below both engines (in the kernel, and in workers where a task calls it): the dask
settings for CuPy chunks, advice on chunk sizes, and the Philox random state (``philox_random_state``)."""
