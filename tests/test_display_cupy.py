"""CuPy-array display with a stand-in CuPy module: device, sizes, pool use and a small host preview."""

from __future__ import annotations

import contextlib
import sys
import types
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from IPython.core.interactiveshell import InteractiveShell

from gpu_magics.display.objects.cupy_view import CupyView, preview_index

ndarray: Any = None  # the stand-in class, made per test


class _Device:
    def __init__(self, ident: int) -> None:
        self.id = ident


def _fake_cupy(copies: list[tuple[int, ...]], current: list[int]) -> types.ModuleType:
    class FakeArray:
        def __init__(self, data: np.ndarray, device: int) -> None:
            self._data, self.device = data, _Device(device)
            self.shape, self.dtype, self.nbytes = data.shape, data.dtype, data.nbytes

        def __getitem__(self, key: Any) -> FakeArray:
            return FakeArray(self._data[key], self.device.id)

        def get(self) -> np.ndarray:
            copies.append(self._data.shape)
            return self._data.copy()

    FakeArray.__module__, FakeArray.__name__, FakeArray.__qualname__ = "cupy", "ndarray", "ndarray"

    class Pool:
        def used_bytes(self) -> int:
            return 1_000_000 * (current[-1] + 1)

        def total_bytes(self) -> int:
            return 4_000_000 * (current[-1] + 1)

    @contextlib.contextmanager
    def device(ident: int) -> Iterator[None]:
        current.append(ident)
        try:
            yield
        finally:
            current.pop()

    module = types.ModuleType("cupy")
    module.ndarray = FakeArray  # type: ignore[attr-defined]
    module.get_default_memory_pool = Pool  # type: ignore[attr-defined]
    runtime = types.SimpleNamespace(memGetInfo=lambda: (60 * 10**9, 80 * 10**9))
    module.cuda = types.SimpleNamespace(Device=device, runtime=runtime)  # type: ignore[attr-defined]
    return module


@pytest.fixture
def cupy(monkeypatch: pytest.MonkeyPatch) -> tuple[types.ModuleType, list[tuple[int, ...]]]:
    copies: list[tuple[int, ...]] = []
    module = _fake_cupy(copies, [0])
    monkeypatch.setitem(sys.modules, "cupy", module)
    return module, copies


def test_preview_index() -> None:
    assert preview_index(()) == ()
    assert preview_index((100,)) == (slice(0, 6),)
    assert preview_index((5, 100, 100)) == (slice(0, 2), slice(0, 4), slice(0, 6))


def test_view(cupy: tuple[types.ModuleType, list[tuple[int, ...]]]) -> None:
    module, copies = cupy
    arr = module.ndarray(np.arange(1_000_000, dtype="float32").reshape(1000, 1000), device=1)
    view = CupyView(arr)
    assert copies == [(4, 6)]  # only the corner came to the host
    text, html = view.text(), view.html()
    assert "device=1" in text and "GPU 1" in html
    assert "shape=(1000, 1000)" in text and "float32" in text
    assert "3.8 MiB" in text  # bytes: 4e6
    assert "1.9 MiB used of 7.6 MiB held" in text  # pool of device 1: 2e6 of 8e6
    assert "18.6 GiB used of 74.5 GiB" in text  # 20e9 of 80e9
    assert "first (4, 6) of (1000, 1000)" in text and "1001" in text
    assert "<pre" in html


def test_small_and_scalar(cupy: tuple[types.ModuleType, list[tuple[int, ...]]]) -> None:
    module, _ = cupy
    assert "values" in CupyView(module.ndarray(np.arange(3), device=0)).text()
    assert "shape=()" in CupyView(module.ndarray(np.array(2.5), device=0)).text()


def test_formatter(ip: InteractiveShell, cupy: tuple[types.ModuleType, list[tuple[int, ...]]]) -> None:
    module, _ = cupy
    arr = module.ndarray(np.ones((3, 3)), device=0)
    data, _ = ip.display_formatter.format(arr)
    assert data["text/plain"].startswith("cupy.ndarray<")
    assert "gpu-magics-cupy" in data["text/html"]
