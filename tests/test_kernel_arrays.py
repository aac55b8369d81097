"""The kernel's parkable CuPy memory is installed where it should be: at CuPy's import once the extension is loaded (its
own import runs first), never twice, never with simulated GPUs, never over a pool that holds arrays already, only
where ``$GPU_MAGICS_PARKABLE_ARRAYS=1`` asks for it. CuPy is stood in by a package that records what is done to its
pool (the allocator's driver calls themselves run in ``tests/gpu/test_parking_notebook_gpu.py``)."""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpu_magics.cluster.workers import kernel_arrays

STAND_IN = """
imported_before_install = True


class MemoryPool:
    def __init__(self, allocator=None):
        self.allocator = allocator
        self.held = 0

    def malloc(self, size):
        return self.allocator(size)

    def total_bytes(self):
        return self.held


class _Cuda:
    allocator = None

    @staticmethod
    def set_allocator(allocator):
        _Cuda.allocator = allocator


cuda = _Cuda()
cuda.MemoryPool = MemoryPool
_default_memory_pool = MemoryPool()


def get_default_memory_pool():
    return _default_memory_pool
"""


class FakeMemory:
    """``ParkableMemory`` without the driver: what the pool would call."""

    def malloc(self, size: int) -> tuple[str, int]:
        return ("parkable", size)


@pytest.fixture
def stand_in(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    (tmp_path / "cupy").mkdir()
    (tmp_path / "cupy" / "__init__.py").write_text(STAND_IN)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "cupy", raising=False)
    monkeypatch.setattr(kernel_arrays, "_memory", None)
    monkeypatch.setattr(kernel_arrays, "ParkableMemory", FakeMemory)
    monkeypatch.setenv(kernel_arrays.ASK_ENV, "1")
    monkeypatch.delenv("GPU_MAGICS_SOURCE", raising=False)
    yield tmp_path
    kernel_arrays.stop_watching()
    sys.modules.pop("cupy", None)


def finders() -> int:
    return sum(isinstance(finder, kernel_arrays._InstallOnImport) for finder in sys.meta_path)


def test_cupys_import_installs_the_parkable_pool_after_its_own_import(stand_in: Path) -> None:
    kernel_arrays.install_on_import()
    kernel_arrays.install_on_import()  # a second load watches once
    assert finders() == 1 and not kernel_arrays.installed()
    assert importlib.util.find_spec("cupy") is not None  # only looking for CuPy (as the package does) installs nothing
    assert not kernel_arrays.installed() and "cupy" not in sys.modules
    cupy = importlib.import_module("cupy")
    assert kernel_arrays.installed()
    pool = cupy.get_default_memory_pool()
    assert isinstance(pool.allocator.__self__, FakeMemory)  # the default pool takes its blocks from the driver's calls
    assert cupy.cuda.allocator == pool.malloc and pool.malloc(1 << 30) == ("parkable", 1 << 30)
    kernel_arrays.stop_watching()
    assert finders() == 0


def test_an_imported_cupy_gets_it_at_once_unless_its_pool_holds_arrays(stand_in: Path) -> None:
    cupy = importlib.import_module("cupy")
    cupy.get_default_memory_pool().held = 4096  # arrays made before the extension was loaded
    kernel_arrays.install_on_import()
    assert not kernel_arrays.installed() and finders() == 0  # the driver parks that pool's memory as before
    cupy.get_default_memory_pool().held = 0
    kernel_arrays.install_on_import()
    assert kernel_arrays.installed() and isinstance(cupy.get_default_memory_pool().allocator.__self__, FakeMemory)


@pytest.mark.parametrize(
    ("name", "value"), [(kernel_arrays.ASK_ENV, "0"), (kernel_arrays.ASK_ENV, ""), ("GPU_MAGICS_SOURCE", "fake:2")]
)
def test_not_asked_for_or_simulated_gpus_leave_cupys_pool_as_it_is(
    stand_in: Path, monkeypatch: pytest.MonkeyPatch, name: str, value: str
) -> None:
    monkeypatch.setenv(name, value)
    kernel_arrays.install_on_import()
    cupy = importlib.import_module("cupy")
    original = cupy.get_default_memory_pool()
    assert kernel_arrays.install() is False and not kernel_arrays.installed()
    assert cupy.get_default_memory_pool() is original and original.allocator is None


def test_with_nothing_parkable_a_park_and_a_resume_copy_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kernel_arrays, "_memory", None)
    assert kernel_arrays.held_bytes() == 0
    assert kernel_arrays.offload()["bytes"] == 0 and kernel_arrays.reload()["bytes"] == 0
