"""A Run All on a real GPU, through a real kernel (jupyter_client, as JupyterLab drives it): the plain dask cells right
after ``%gpucluster`` run on the cluster's GPU workers, not in the kernel, while the workers still start."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.test_kernel_faults import loaded_kernel

pytestmark = pytest.mark.gpu
pytest.importorskip("cupy")
pytest.importorskip("dask_cuda")
pytest.importorskip("ipykernel")


def test_plain_cells_right_after_the_start_run_on_the_gpu_workers(tmp_path: Path) -> None:
    with loaded_kernel(tmp_path, source="nvml") as kernel:
        cells = [
            "%gpucluster --gpus 0 --name runall --client c",
            "import os, dask, dask.array as da, numpy as np\n"
            "x = da.random.RandomState(1).normal(10, 1, size=(4000, 4000), chunks=1000)\n"
            "pids = da.map_blocks(lambda b: np.full((1, 1), os.getpid()), x[:, :1], chunks=(1, 1), meta=np.empty(0))\n"
            "print('here' if os.getpid() in set(pids.compute().ravel().tolist()) else 'on the workers')",
            "import distributed; print(distributed.get_client() is c)",
            "y = (x + 1).persist(); print(type(y._meta).__module__.split('.')[0], round(float(y.mean().compute()), 1))",
        ]
        ids = [kernel.start(cell) for cell in cells]
        replies = [kernel.finish(msg_id, timeout=180) for msg_id in ids]
        assert all(reply["status"] == "ok" for reply, _ in replies), replies
        texts = [text.strip().splitlines()[-1] for _, text in replies[1:]]
        assert texts == ["on the workers", "True", "numpy 11.0"], texts  # dask's own settings: NumPy chunks
        kernel.ok("%gpucluster stop")
