"""The reseeded generators draw exactly the numbers dask's own path draws (a new CuPy ``RandomState`` per chunk),
on one GPU through ``%%gpurun gpu``."""

from __future__ import annotations

import pytest
from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output

from tests.test_time_split import let_go_of_the_last_cell

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


def test_a_reduction_on_the_cluster_runs_one_task_per_gpu_with_dask_owns_value(ip: InteractiveShell) -> None:
    """``%%gpurun multi-gpu`` on every GPU: the seed's chunk tasks run as one task per GPU (``grouping``), each
    combining its own chunks (``folding``), drawn from the seeds worked out on the scheduler (``cupy_seed``), with
    the aggregate in the kernel (``kernel_tail``); the mean is the one dask's own threaded path gives from the same
    draws (to 1e-12: summed in another order)."""
    import cupy
    import dask
    import dask.array as da
    from dask.array.optimization import optimize

    from gpu_magics.gpurun.graphs.tuning import REDUCTION_SPLIT_EVERY

    count = cupy.cuda.runtime.getDeviceCount()
    cell = (
        "import dask.array as da\n"
        "t_y = da.random.RandomState(11).normal(10, 1, size=(16000, 16000), chunks=2000)\n"
        "t_value = (t_y + 1)[::2, ::2].mean().compute()\n"
        "t_mean = float(t_value)\n"
    )
    gpus = ",".join(map(str, range(count)))
    try:
        with capture_output():
            ip.run_line_magic("gpucluster", f"--gpus {gpus} --replace --name grouping")
            ip.run_cell_magic("gpurun", "multi-gpu -q --no-monitor -o t_grouped", cell)
            here, here_type = ip.user_ns["t_mean"], type(ip.user_ns["t_value"])
            let_go_of_the_last_cell()  # the same runs again: computed again, not found still held
            with dask.config.set({"gpu-magics.aggregate-in-kernel": False}):  # the aggregate on a worker
                ip.run_cell_magic("gpurun", "multi-gpu -q --no-monitor -o t_there", cell)
    finally:
        with capture_output():
            ip.run_line_magic("gpucluster", "stop")
    result = ip.user_ns["t_grouped"]
    assert result.split is not None
    runs = [count for prefix, count in result.split.prefixes.items() if prefix.endswith("-runs")]
    assert runs == [count]  # 64 chunks: one run on each GPU
    assert not [prefix for prefix in result.split.prefixes if "partial" in prefix]  # folded: each run combines its own
    assert result.tasks == count  # the aggregate ran in the kernel, on the runs' partial results (``kernel_tail``)
    assert ip.user_ns["t_there"].tasks == count + 1
    assert here == ip.user_ns["t_mean"]  # the same function on the same partial results: the same bits
    assert here_type is type(ip.user_ns["t_value"]) is cupy.ndarray  # a CuPy result in the kernel, as before
    settings = {"array.backend": "cupy", "scheduler": "threads", "array_optimize": optimize}
    with dask.config.set({**settings, "split_every": REDUCTION_SPLIT_EVERY}):
        y = da.random.RandomState(11).normal(10, 1, size=(16000, 16000), chunks=2000)
        expected = float((y + 1)[::2, ::2].mean().compute())
    assert ip.user_ns["t_mean"] == pytest.approx(expected, rel=1e-12)
