"""``philox_random_state(seed)``: a dask ``RandomState`` whose chunks draw with CuPy's Philox generator.

dask makes one generator per chunk; CuPy's default (XORWOW) spends most of a small chunk's time setting its
generator up, Philox almost none. The call returns dask's own ``da.random.RandomState``, so its API is dask's
(``rs.normal(...)``, ``rs.random_sample(...)``, ``chunks=``); only the per-chunk generator differs. CuPy is
imported when it is called, not when ``gpu_magics`` is.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from dask.array.random import RandomState

CALL = "gpu_magics.philox_random_state(seed)"


def philox_random_state(seed: Any = None) -> RandomState:
    """A ``dask.array.random.RandomState`` drawing each chunk with CuPy's Philox (CUPY chunks, on any backend).

    Example::

        rs = gpu_magics.philox_random_state(42)
        x = rs.normal(10, 1, size=(50_000, 50_000), chunks=(10_000, 10_000))
    """
    try:
        import cupy
        from cupy.cuda import curand
    except ImportError as error:
        raise ImportError(
            "philox_random_state draws with CuPy, which is not installed (pip install 'gpu-magics[cuda12]')"
        ) from error
    import dask.array as da

    generator = functools.partial(cupy.random.RandomState, method=curand.CURAND_RNG_PSEUDO_PHILOX4_32_10)
    return da.random.RandomState(seed, RandomState=generator)
