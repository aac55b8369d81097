"""Dask-array display: table, chunk grid, GPU memory fit, hints, escaping, and never computing."""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import dask.array as da
import numpy as np
import pytest

from gpu_magics.display.objects import array_view
from gpu_magics.display.objects.array_view import ArrayView, array_info

GIB = 2**30  # GPU memory, as NVML reports it


@pytest.fixture(autouse=True)
def _no_gpus() -> Iterator[None]:
    array_view.set_gpu_memory_probe(lambda: None)
    yield
    array_view.set_gpu_memory_probe(None)


class Boom:
    """An array-like whose data must never be read."""

    shape = (1000, 1000)
    dtype = np.dtype("float64")
    ndim = 2

    def __getitem__(self, key: Any) -> Any:
        raise AssertionError("the display read the data")


def test_table_and_text() -> None:
    x = da.ones((20000, 20000), chunks=(2000, 5000))
    view = ArrayView(x)
    text, html = view.text(), view.html()
    assert "shape=(20000, 20000)" in text and "chunksize=(2000, 5000)" in text
    assert "3.0 GiB in all, 76.3 MiB per chunk" in text
    assert "10 × 4 = 40" in text
    assert "numpy.ndarray (CPU)" in text
    assert "40 tasks in 1 graph layer" in text
    assert "GPU memory  no GPU visible" in text and "unknown" not in text
    assert "<svg" in html and "numpy.ndarray" in html and "76.3 MiB" in html
    assert view._repr_mimebundle_() == {"text/plain": text, "text/html": html}


def test_graph_size_counts_layers() -> None:
    x = da.ones((100, 100), chunks=10)
    info = array_info((x + 1).sum(axis=0))
    assert info.layers == len(((x + 1).sum(axis=0)).dask.layers)
    assert info.tasks == len(((x + 1).sum(axis=0)).dask)


def test_never_computes_or_reads_data() -> None:
    calls: list[int] = []

    def record(block: np.ndarray) -> np.ndarray:
        calls.append(1)
        return block

    x = da.from_array(Boom(), chunks=100, meta=np.empty((0, 0)))
    y = x.map_blocks(record, meta=np.empty((0, 0)))
    html = ArrayView(y).html() + ArrayView(x).text()
    assert calls == [] and "1000" in html


def test_names_are_escaped() -> None:
    x = da.from_array(np.ones((4, 4)), chunks=2, name="<script>alert(1)</script>")
    html = ArrayView(x).html()
    assert "<script>" not in html and "&lt;script&gt;" in html


def test_gpu_memory_fit() -> None:
    x = da.ones((100_000, 100_000), chunks=(10_000, 10_000))  # 80e9 bytes (74.5 GiB), 800e6-byte chunks
    info = array_info(x, gpu_memory=(141 * GIB,))
    assert info.memory_lines() == [
        "one chunk (763 MiB) fits in one GPU (141 GiB)",
        "whole array (74.5 GiB) fits in 1 visible GPU (141 GiB)",
    ]
    small = array_info(x, gpu_memory=(16 * GIB, 16 * GIB))
    assert "does NOT fit in 2 visible GPUs (32.0 GiB): 2.3x" in small.memory_lines()[1]


def test_gpu_memory_probe_is_cached_and_injectable() -> None:
    asked: list[int] = []

    def probe() -> tuple[int, ...]:
        asked.append(1)
        return (80 * GIB,)

    array_view.set_gpu_memory_probe(probe)
    assert array_view.visible_gpu_memory() == (80 * GIB,)
    assert array_view.visible_gpu_memory() == (80 * GIB,)
    assert asked == [1]
    text = ArrayView(da.ones((10, 10), chunks=5)).text()
    assert "fits in one GPU (80.0 GiB)" in text


def test_failing_probe_means_unknown() -> None:
    def probe() -> tuple[int, ...]:
        raise RuntimeError("no driver")

    array_view.set_gpu_memory_probe(probe)
    assert array_view.visible_gpu_memory() is None


def test_small_cupy_chunks_hint() -> None:
    hints = array_view._hints((100_000, 100_000), (1000, 1000), np.dtype("f8"), "cupy", 8e6, 10_000, None)
    assert len(hints) == 1
    assert "7.6 MiB are small for a GPU" in hints[0] and "1 ms of scheduling" in hints[0]
    assert "0.04 ms of GPU work" in hints[0] and "x.rechunk((" in hints[0]
    assert len(hints[0]) <= 160 and "H200" not in hints[0]  # advice fits one line, and names no other hardware
    assert array_view._hints((100_000,), (1000,), np.dtype("f8"), "numpy", 8e3, 100, None) == ()


def test_large_chunk_hint() -> None:
    hints = array_view._hints((300_000, 100_000), (100_000, 100_000), np.dtype("f8"), "cupy", 80e9, 3, (80 * GIB,))
    assert len(hints) == 1 and "too large for one GPU" in hints[0] and len(hints[0]) <= 160
    x = da.ones((300_000, 100_000), chunks=(100_000, 100_000))
    assert "too large for one GPU" in ArrayView(x, gpu_memory=(16 * GIB,)).text()


def test_unknown_chunk_sizes() -> None:
    x = da.ones((10, 10), chunks=5)
    y = x[x[:, 0] > 0]  # unknown number of rows
    view = ArrayView(y, gpu_memory=(80 * GIB,))
    assert math.isnan(view.info.nbytes)
    assert "\u2013 in all" in view.text() and "size unknown" in view.text() and "(?, 10)" in view.text()
    assert "stroke-dasharray" in view.html()


@pytest.mark.parametrize("shape", [(), (7,), (6, 4), (4, 6, 8), (2, 3, 4, 5)])
def test_any_dimension(shape: tuple[int, ...]) -> None:
    x = da.ones(shape, chunks=2)
    view = ArrayView(x)
    assert "<svg" in view.html() and view.text().startswith("dask.array<")


def test_million_chunks_bounded() -> None:
    x = da.ones((1_000_000, 1_000_000), chunks=(1000, 1000))
    html = ArrayView(x).html()
    assert "1,000 × 1,000 = 1,000,000" in html
    assert len(html) < 20_000


def test_no_gpu_reads_as_a_fact_not_a_failure() -> None:
    view = ArrayView(da.ones((10, 10), chunks=5), gpu_memory=None)
    assert "GPU memory  no GPU visible" in view.text()
    html = view.html()
    assert "no GPU visible" in html and "unknown" not in html
    assert "var(--jp-ui-font-color2" in html  # dimmed, in the theme's secondary colour
