"""``%%gpurun gpu`` on a real CUDA device (skipped where CuPy sees none)."""

from __future__ import annotations

import pytest
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell

SEED = """
import dask.array as da
t_x = da.random.normal(10, 1, size=(4000, 4000), chunks=1000)
(t_x + 1)[::2, ::2].mean().compute()
"""


def test_gpu_backend_runs_cupy_chunks_and_names_the_gpu(ip: InteractiveShell) -> None:
    import cupy

    value = ip.run_cell_magic("gpurun", "gpu -o t_r", SEED)
    assert isinstance(value, cupy.ndarray)
    assert float(value) == pytest.approx(11.0, rel=1e-3)
    result = ip.user_ns["t_r"]
    name = cupy.cuda.runtime.getDeviceProperties(0)["name"]
    name = name.decode() if isinstance(name, bytes) else name
    assert result.backend == "gpu" and result.hardware.startswith(f"1x {name}")
    assert result.tasks is not None and result.tasks >= 16
    assert type(ip.user_ns["t_x"]._meta).__module__.startswith("cupy")


def test_each_device_runs_its_own_cells(ip: InteractiveShell) -> None:
    import cupy

    count = cupy.cuda.runtime.getDeviceCount()
    cell = (
        "import cupy, dask.array as da\n"
        "da.ones((8, 8), chunks=4).map_blocks(lambda b: cupy.full_like(b, cupy.cuda.Device().id)).max().compute()"
    )
    for index in range(count):
        value = ip.run_cell_magic("gpurun", f"gpu --device {index} -q", cell)
        assert int(value) == index


def test_device_out_of_range_names_the_visible_gpus(ip: InteractiveShell) -> None:
    import cupy

    count = cupy.cuda.runtime.getDeviceCount()
    with pytest.raises(UsageError, match=rf"there is no GPU {count + 8}; visible GPUs: 0 \("):
        ip.run_cell_magic("gpurun", f"gpu --device {count + 8}", "t_ran = True")
    assert "t_ran" not in ip.user_ns


def test_compare_cpu_and_gpu_agree(ip: InteractiveShell) -> None:
    ip.run_cell_magic("gpurun", "--compare cpu-threads,gpu -q -o t_cmp", SEED)
    comparison = ip.user_ns["t_cmp"]
    assert [row.result.backend for row in comparison.rows] == ["cpu-threads", "gpu"]
    assert comparison.rows[1].agreement == "agrees"


def test_numpy_array_in_a_gpu_cell_is_flagged(ip: InteractiveShell) -> None:
    ip.run_cell("import dask.array as da\nt_np = da.ones((100, 100), chunks=50)")
    ip.run_cell_magic("gpurun", "gpu -q -o t_r", "t_np.sum().compute()")
    notes = " ".join(ip.user_ns["t_r"].notes)
    assert 't_np = t_np.to_backend("cupy")' in notes


def test_auto_picks_the_gpu(ip: InteractiveShell) -> None:
    ip.run_cell_magic("gpurun", "-q -o t_r", "1")
    result = ip.user_ns["t_r"]
    assert result.backend in ("gpu", "multi-gpu")
    assert any("auto picked" in note for note in result.notes)
