"""GPU tests: collected everywhere, run only where CuPy sees a CUDA device."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from IPython.core.interactiveshell import InteractiveShell

from gpu_magics.cluster.records import record as cluster_records
from gpu_magics.magics.gpucluster import ClusterMagics


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


@pytest.fixture(scope="module")
def magics(_session_shell: InteractiveShell, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterMagics]:
    """The cluster magics for a module's tests, with a runtime dir of their own (a module may define its own)."""
    previous = os.environ.get(cluster_records.RUNTIME_DIR_ENV)
    os.environ[cluster_records.RUNTIME_DIR_ENV] = str(tmp_path_factory.mktemp("runtime"))
    instance = ClusterMagics(shell=_session_shell)
    yield instance
    instance.close()
    if previous is None:
        del os.environ[cluster_records.RUNTIME_DIR_ENV]
    else:
        os.environ[cluster_records.RUNTIME_DIR_ENV] = previous
