"""The fast path's copies between a worker's GPU and host memory (``workers.offload._copy_through_pinned``), with
CUDA's runtime stood in by plain memory copies: every piece lands at its place, split in parts on the streams,
whatever their sizes; the buffer is pinned for the copies only (unpinned after them, also when one fails), and a pin
that fails pins nothing."""

from __future__ import annotations

import ctypes
import sys
import threading
import types
from collections.abc import Iterator

import numpy as np
import pytest

from gpu_magics.cluster.workers import offload


class FakeRuntime:
    """``cupy.cuda.runtime``'s calls the pipeline makes: copies done at once, pins and unpins recorded."""

    memcpyHostToDevice, memcpyDeviceToHost = 1, 2

    def __init__(self, fail_pin_at: int | None = None) -> None:
        self.pinned: set[int] = set()
        self.unpinned: list[int] = []
        self.copied_while_pinned = True
        self.fail_pin_at = fail_pin_at
        self.fail_copy = False
        self._lock = threading.Lock()

    def hostRegister(self, pointer: int, size: int, flags: int) -> None:
        if pointer == self.fail_pin_at:
            raise RuntimeError("cudaErrorHostMemoryAlreadyRegistered")
        with self._lock:
            self.pinned.add(pointer)

    def hostUnregister(self, pointer: int) -> None:
        with self._lock:
            self.pinned.discard(pointer)
            self.unpinned.append(pointer)

    def memcpyAsync(self, destination: int, source: int, size: int, kind: int, stream: int) -> None:
        assert kind in (self.memcpyHostToDevice, self.memcpyDeviceToHost)
        if self.fail_copy:
            raise RuntimeError("cudaErrorIllegalAddress")
        assert self.pinned, "a copy while the host buffer is not pinned"
        ctypes.memmove(destination, source, size)


class FakeStream:
    def __init__(self, non_blocking: bool = False) -> None:
        self.ptr = id(self)

    def synchronize(self) -> None:
        pass


@pytest.fixture
def runtime(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeRuntime]:
    fake = FakeRuntime()
    cuda = types.SimpleNamespace(runtime=fake, Stream=FakeStream)
    monkeypatch.setitem(sys.modules, "cupy", types.SimpleNamespace(cuda=cuda))
    monkeypatch.setattr(offload, "PIECE_BYTES", 3000)  # arrays split in parts over the streams
    yield fake


def layout(sizes: list[int]) -> tuple[list[np.ndarray], list[int], int]:
    """'Device' arrays of these sizes and their page-aligned offsets in a host buffer."""
    rng = np.random.default_rng(0)
    arrays = [rng.integers(0, 255, size, dtype=np.uint8) for size in sizes]
    offsets, at = [], 0
    for size in sizes:
        offsets.append(at)
        at += -(-size // offload.ALIGN) * offload.ALIGN
    return arrays, offsets, at


@pytest.mark.parametrize("sizes", [[1], [100_000], [4096, 9000, 1, 70_001, 4096 * 7], [50_000] * 9])
def test_every_piece_goes_out_and_comes_back_at_its_place_and_the_buffer_is_unpinned(
    runtime: FakeRuntime, sizes: list[int]
) -> None:
    arrays, offsets, total = layout(sizes)
    host = np.empty(total, np.uint8)
    clock = offload.Clock()
    out = [(offset, array.ctypes.data, array.nbytes) for array, offset in zip(arrays, offsets, strict=True)]
    offload._copy_through_pinned(host, out, True, clock)
    for array, offset in zip(arrays, offsets, strict=True):
        assert np.array_equal(host[offset : offset + array.nbytes], array)
    assert runtime.pinned == set() and runtime.unpinned == [host.ctypes.data]
    back = [np.zeros_like(array) for array in arrays]
    offload._copy_through_pinned(
        host, [(o, b.ctypes.data, b.nbytes) for b, o in zip(back, offsets, strict=True)], False, clock
    )
    assert all(np.array_equal(a, b) for a, b in zip(arrays, back, strict=True))
    assert runtime.pinned == set() and set(clock.steps) == {"touch", "pin", "copy", "unpin"}


def test_a_pin_that_fails_pins_nothing_and_a_copy_that_fails_leaves_the_buffer_unpinned(runtime: FakeRuntime) -> None:
    arrays, _, total = layout([60_000])
    host = np.empty(total, np.uint8)
    piece = [(0, arrays[0].ctypes.data, arrays[0].nbytes)]
    runtime.fail_pin_at = host.ctypes.data
    with pytest.raises(RuntimeError, match="AlreadyRegistered"):
        offload._copy_through_pinned(host, piece, True, offload.Clock())
    assert runtime.pinned == set() and runtime.unpinned == []
    runtime.fail_pin_at, runtime.fail_copy = None, True
    with pytest.raises(RuntimeError, match="IllegalAddress"):
        offload._copy_through_pinned(host, piece, True, offload.Clock())
    assert runtime.pinned == set() and runtime.unpinned == [host.ctypes.data]
