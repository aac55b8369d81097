"""``gpu_magics.philox_random_state`` on a real GPU: CuPy chunks, seeded, drawn with Philox."""

from __future__ import annotations

import pytest

import gpu_magics

cupy = pytest.importorskip("cupy")


def test_philox_draws_cupy_chunks_reproducibly() -> None:
    import dask

    with dask.config.set(scheduler="synchronous"):
        x = gpu_magics.philox_random_state(7).normal(10, 1, size=(4000, 4000), chunks=2000)
        first = x.compute()
        again = gpu_magics.philox_random_state(7).normal(10, 1, size=(4000, 4000), chunks=2000).compute()
    assert isinstance(first, cupy.ndarray)
    assert abs(float(first.mean()) - 10) < 0.01
    assert bool((first == again).all())
