"""Displays on a real GPU: cupy-backed dask arrays and CuPy arrays show the right device and chunk type."""

from __future__ import annotations

from typing import Any

import dask
import dask.array as da
import pytest
from IPython.core.interactiveshell import InteractiveShell

from gpu_magics.display import svg
from gpu_magics.display.graph_view import graph_summary
from gpu_magics.display.objects import array_view
from gpu_magics.display.objects.array_view import ArrayView
from gpu_magics.display.objects.cupy_view import CupyView

cupy: Any = pytest.importorskip("cupy")


def cupy_ones(shape: tuple[int, ...], chunks: int) -> Any:
    with dask.config.set({"array.backend": "cupy"}):
        return da.ones(shape, chunks=chunks)


def test_cupy_backed_dask_array() -> None:
    array_view.set_gpu_memory_probe(None)  # real NVML
    x = cupy_ones((4000, 4000), 1000)  # 8 MB chunks: small for a GPU
    view = ArrayView(x)
    info = view.info
    assert info.chunk_library == "cupy" and info.chunk_type == "cupy.ndarray"
    assert info.device == cupy.cuda.Device().id
    assert info.gpu_memory is not None and len(info.gpu_memory) == cupy.cuda.runtime.getDeviceCount()
    text = view.text()
    assert f"cupy.ndarray (GPU {info.device})" in text and "fits in one GPU" in text
    assert "small for a GPU" in text
    assert svg.COLOURS["cupy"][0] in view.html()


def test_cupy_array_on_each_device() -> None:
    for device in range(min(2, cupy.cuda.runtime.getDeviceCount())):
        with cupy.cuda.Device(device):
            arr = cupy.arange(1_000_000, dtype="float32").reshape(1000, 1000)
            view = CupyView(arr)
        assert view.info.device == device
        assert view.info.preview_shape == (4, 6)
        assert view.info.pool_used is not None and view.info.pool_used >= arr.nbytes
        assert f"device={device}" in view.text() and "1001" in view.text()


def test_graph_summary_chunk_type() -> None:
    x = cupy_ones((2000, 2000), 500)
    summary = graph_summary((x + x.T).sum())
    assert all(layer.chunk_type in (None, "cupy.ndarray") for layer in summary.layers)
    assert svg.COLOURS["cupy"][0] in summary.to_svg()


def test_formatters(ip: InteractiveShell) -> None:
    data, _ = ip.display_formatter.format(cupy.ones((3, 3)))
    assert data["text/plain"].startswith("cupy.ndarray<") and "gpu-magics-cupy" in data["text/html"]
    data, _ = ip.display_formatter.format(cupy_ones((100, 100), 50))
    assert "cupy.ndarray" in data["text/plain"] and "gpu-magics-array" in data["text/html"]
