"""GPU tests: collected everywhere, run only where CuPy sees a CUDA device."""

from __future__ import annotations

import pytest


def _gpu_count() -> int:
    try:
        import cupy
    except ImportError:
        return 0
    try:
        return int(cupy.cuda.runtime.getDeviceCount())
    except Exception:
        return 0


GPU_COUNT = _gpu_count()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    skip = pytest.mark.skip(reason="needs a CUDA GPU and CuPy")
    for item in items:
        if "tests/gpu/" in str(item.fspath).replace("\\", "/"):
            item.add_marker(pytest.mark.gpu)
            if GPU_COUNT == 0:
                item.add_marker(skip)
