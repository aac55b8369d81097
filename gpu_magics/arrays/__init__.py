"""How dask arrays run on GPUs, below both engines (in the kernel, and in workers where a task calls it): the dask
settings for CuPy chunks, advice on chunk sizes, the Philox random state (``philox_random_state``), and the
notebook's memory cap that bounds the allocators arrays come from (``caps``)."""
