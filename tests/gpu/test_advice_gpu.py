"""The advice line of a ``multi-gpu`` cell on the GPUs says where the time went (``advice``): chunks that do not
split evenly over the GPUs, with chunks that do."""

from __future__ import annotations

import pytest
from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output

CELL = (
    "import dask.array as da\n"
    "t_x = da.ones((30000, 30000), chunks=10000) + 1\n"  # 9 chunks of 800 MB
    "t_sum = float(t_x.sum().compute())\n"
)


def test_nine_chunks_on_several_gpus_get_chunks_that_split_evenly(ip: InteractiveShell) -> None:
    import cupy

    count = cupy.cuda.runtime.getDeviceCount()
    if count < 2:
        pytest.skip("needs 2 GPUs or more")
    gpus = ",".join(map(str, range(count)))
    try:
        with capture_output():
            ip.run_line_magic("gpucluster", f"--gpus {gpus} --replace --name advice")
            ip.run_cell_magic("gpurun", "multi-gpu -q --no-monitor", CELL)  # the first run here: no advice
            ip.run_cell_magic("gpurun", "multi-gpu -q --no-monitor -o t_result", CELL)
    finally:
        with capture_output():
            ip.run_line_magic("gpucluster", "stop")
    assert ip.user_ns["t_sum"] == 2.0 * 30000 * 30000
    result = ip.user_ns["t_result"]
    assert result.split is not None and result.split.workers == count
    assert result.advice is not None and result.advice.startswith(f"9 chunks do not split evenly over {count} GPUs")
    assert "make t_x with chunks=" in result.advice and result.advice.endswith(" a GPU; now 10000)"), result.advice
    assert len(result.advice) <= 160
