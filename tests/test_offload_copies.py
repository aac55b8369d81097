"""The fast path's copies between a GPU and host memory (``workers.host_copies``), with CUDA's
runtime stood in by plain memory copies: every piece lands at its place, split in parts on the streams, whatever
their sizes; the buffer is pinned a segment at a time and no part is copied before all its memory is pinned; it is
unpinned after the copies (also when one fails, or a pin), or, on the way back, handed over to be unpinned later."""

from __future__ import annotations

import ctypes
import sys
import threading
import types
from collections.abc import Iterator

import numpy as np
import pytest

from gpu_magics.cluster.workers import host_copies as offload


class FakeRuntime:
    """``cupy.cuda.runtime``'s calls the pipeline makes: copies done at once, pins and unpins recorded."""

    memcpyHostToDevice, memcpyDeviceToHost = 1, 2

    def __init__(self, fail_pin_at: int | None = None) -> None:
        self.pinned: dict[int, int] = {}  # start -> bytes
        self.unpinned: list[int] = []
        self.copied_while_pinned = True
        self.fail_pin_at = fail_pin_at
        self.fail_copy = False
        self._lock = threading.Lock()

    def hostRegister(self, pointer: int, size: int, flags: int) -> None:
        if pointer == self.fail_pin_at:
            raise RuntimeError("cudaErrorHostMemoryAlreadyRegistered")
        with self._lock:
            self.pinned[pointer] = size

    def hostUnregister(self, pointer: int) -> None:
        with self._lock:
            del self.pinned[pointer]
            self.unpinned.append(pointer)

    def is_pinned(self, start: int, size: int) -> bool:
        """Whether every byte of ``[start, start + size)`` lies in a pinned segment."""
        covered = start
        for begin, length in sorted(self.pinned.items()):
            if begin <= covered < begin + length:
                covered = begin + length
        return covered >= start + size

    def memcpyAsync(self, destination: int, source: int, size: int, kind: int, stream: int) -> None:
        assert kind in (self.memcpyHostToDevice, self.memcpyDeviceToHost)
        if self.fail_copy:
            raise RuntimeError("cudaErrorIllegalAddress")
        host = destination if kind == self.memcpyDeviceToHost else source
        assert self.is_pinned(host, size), "a copy from or to host memory not pinned yet"
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
    monkeypatch.setattr(offload, "SEGMENT_BYTES", 4096 * 5)  # and the buffer pinned in segments
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
    segments = [host.ctypes.data + start for start in range(0, total, offload.SEGMENT_BYTES)]
    clock = offload.Clock()
    out = [(offset, array.ctypes.data, array.nbytes) for array, offset in zip(arrays, offsets, strict=True)]
    assert offload.copy_through_pinned(host, out, True, clock) is None
    for array, offset in zip(arrays, offsets, strict=True):
        assert np.array_equal(host[offset : offset + array.nbytes], array)
    assert runtime.pinned == {} and sorted(runtime.unpinned) == segments
    assert set(clock.steps) == {"touch", "pin", "copy", "unpin"}
    back = [np.zeros_like(array) for array in arrays]
    runtime.unpinned.clear()
    unpin = offload.copy_through_pinned(
        host, [(o, b.ctypes.data, b.nbytes) for b, o in zip(back, offsets, strict=True)], False, clock, unpin_later=True
    )
    assert all(np.array_equal(a, b) for a, b in zip(arrays, back, strict=True))
    assert unpin is not None and sorted(runtime.pinned) == segments  # still pinned: the unpin is handed over
    offload.UNPINS.later(unpin, host)
    offload.UNPINS.wait()
    assert runtime.pinned == {} and sorted(runtime.unpinned) == segments


def test_a_pin_or_a_copy_that_fails_leaves_nothing_pinned(runtime: FakeRuntime) -> None:
    arrays, _, total = layout([60_000])
    host = np.empty(total, np.uint8)
    piece = [(0, arrays[0].ctypes.data, arrays[0].nbytes)]
    runtime.fail_pin_at = host.ctypes.data + offload.SEGMENT_BYTES  # the second segment's pin
    with pytest.raises(RuntimeError, match="AlreadyRegistered"):
        offload.copy_through_pinned(host, piece, True, offload.Clock())
    assert runtime.pinned == {} and runtime.unpinned == [host.ctypes.data]
    runtime.unpinned.clear()
    runtime.fail_pin_at, runtime.fail_copy = None, True
    with pytest.raises(RuntimeError, match="IllegalAddress"):
        offload.copy_through_pinned(host, piece, False, offload.Clock(), unpin_later=True)
    assert runtime.pinned == {} and runtime.unpinned == [host.ctypes.data]  # a failed resume unpins at once


def test_an_offload_keeps_no_array_alive_and_the_resume_puts_equal_ones_back() -> None:
    """Every array a worker offloads is freed by the time its pool gives its memory back (a reference left behind is
    memory the pool keeps and the driver then moves slowly: seen on an H200, the loop's name held the last chunk),
    and the resume puts arrays equal to them back."""
    import types
    import weakref

    from gpu_magics.cluster.workers import offload as worker_offload

    class Releasing(worker_offload.SimulatedDevice):
        alive_at_release: list[str] | None = None

        def release(self) -> None:
            self.alive_at_release = [key for key, ref in alive.items() if ref() is not None]

    arrays = {f"x-{i}": np.full(1000 + i, i, dtype=np.float64) for i in range(4)}
    alive = {key: weakref.ref(array) for key, array in arrays.items()}
    worker = types.SimpleNamespace(data=dict(arrays))
    expected = {key: array.copy() for key, array in arrays.items()}
    del arrays
    gpu = Releasing()
    moved = worker_offload._offload(gpu, worker)
    assert moved["bytes"] == sum(array.nbytes for array in expected.values())
    assert gpu.alive_at_release == []
    assert all(isinstance(value, worker_offload.Parked) for value in worker.data.values())
    worker_offload._reload(gpu, worker)
    assert all(np.array_equal(worker.data[key], array) for key, array in expected.items())


@pytest.mark.parametrize("size", [0, 1, 4096 * 3 + 5])
def test_a_host_buffer_is_writable_memory_of_its_size_let_go_with_it(size: int) -> None:
    host = offload.host_buffer(size)
    assert host.nbytes == size and host.flags.writeable and host.dtype == np.uint8
    host[:] = 7
    assert int(host.sum()) == 7 * size
