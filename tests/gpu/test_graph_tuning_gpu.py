"""The reseeded generators draw exactly the numbers dask's own path draws (a new CuPy ``RandomState`` per chunk),
on one GPU through ``%%gpurun gpu``."""

from __future__ import annotations

import pytest
from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output

CELL = (
    "import dask.array as da\n"
    "t_x = da.random.RandomState(7).normal(10, 1, size=(8000, 8000), chunks=2000)\n"
    "t_sum = float((t_x + 1)[::2, ::2].sum().compute())\n"
    "t_blocks = t_x.blocks[1, 2].compute().get()\n"
)


def test_reseeded_draws_equal_dask_own(ip: InteractiveShell) -> None:
    import dask
    import dask.array as da
    from dask.array.optimization import optimize

    with capture_output():
        ip.run_cell_magic("gpurun", "gpu -q --no-monitor", CELL)
    with dask.config.set({"array.backend": "cupy", "scheduler": "threads", "array_optimize": optimize}):
        x = da.random.RandomState(7).normal(10, 1, size=(8000, 8000), chunks=2000)
        expected_sum = float((x + 1)[::2, ::2].sum().compute())
        expected_block = x.blocks[1, 2].compute().get()
    assert ip.user_ns["t_sum"] == pytest.approx(expected_sum, rel=1e-12)
    assert (ip.user_ns["t_blocks"] == expected_block).all()
