"""Copies between a GPU and host memory at the bus's pace, for a park (the workers' arrays, the kernel's) and its
resume: fresh host memory touched by many threads, pinned a segment at a time (``cudaHostRegister``) while the copies
of what is pinned already run on several streams, then unpinned. The driver's own checkpoint copies at about 2 GB/s;
this takes about 55 GB/s on an H200. Through CuPy's runtime calls; ``Clock`` keeps each step's seconds.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import ctypes
import mmap
import os
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np

ALIGN = 4096  # each array's place in the host buffer starts on a page
PIECE_BYTES = 256 << 20  # a large array is copied in pieces of this size, spread over the streams
SEGMENT_BYTES = 2 << 30  # the host buffer is pinned this much at a time, its copies starting as each is pinned
STREAMS = 4


class Clock:
    """How long each step took, in seconds, by name (what the park's figures print)."""

    def __init__(self) -> None:
        self.steps: dict[str, float] = {}
        self._at = time.perf_counter()

    def restart(self) -> None:
        """The next lap counts from now."""
        self._at = time.perf_counter()

    def lap(self, step: str) -> None:
        now = time.perf_counter()
        self.steps[step] = self.steps.get(step, 0.0) + now - self._at
        self._at = now


def host_buffer(size: int) -> np.ndarray:
    """``size`` bytes of fresh host memory in huge pages where the system gives them (``MADV_HUGEPAGE``: on an H200's
    host, 40 GiB touched in 1.1 s and pinned in 0.9 s, against 2.2-2.7 s and 1.7-1.9 s in 4 KiB pages). Let go when
    the array is."""
    region = mmap.mmap(-1, max(size, 1), flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    advice = getattr(mmap, "MADV_HUGEPAGE", None)
    if advice is not None:
        with contextlib.suppress(OSError):  # a kernel without transparent huge pages: 4 KiB pages
            region.madvise(advice)
    return np.frombuffer(region, np.uint8, count=size)


def touch(host: np.ndarray) -> None:
    """Fault every page of ``host`` in, by many threads at once (one thread alone makes about 2.5 GB/s):
    ``ctypes.memset`` lets the GIL go while it runs."""
    threads = max(1, min(16, os.cpu_count() or 1))
    base, size = host.ctypes.data, host.nbytes
    step = -(-size // threads)
    with concurrent.futures.ThreadPoolExecutor(threads, thread_name_prefix="gpu-magics-touch") as pool:
        list(pool.map(lambda start: ctypes.memset(base + start, 0, min(step, size - start)), range(0, size, step)))


def copy_through_pinned(
    host: np.ndarray, pieces: list[tuple[int, int, int]], out: bool, clock: Clock, *, unpin_later: bool = False
) -> Callable[[], None] | None:
    """Copy ``(host offset, device pointer, bytes)`` pieces from the GPU into ``host`` (``out``) or back. On the way
    out the buffer (fresh memory) is first touched by many threads. It is pinned a segment at a time, and each
    segment's parts are copied on ``STREAMS`` streams as soon as it is pinned, while the next one is pinned (the pins
    are the slow part: on an H200, 40 GiB pinned in 1.2-1.6 s, copied in 0.8 s). Then it is unpinned: the driver
    checkpoints pinned memory at about 30 GB/s and restores it as slowly, so a park leaves none pinned. With
    ``unpin_later`` (a resume, whose unpinning is off the way to the next cell) the unpin is returned instead, to run
    later, once (``None`` where nothing was pinned). Pinning segments while other threads fault pages in was twice
    as slow: the touch ends before the first pin."""
    import cupy

    if not pieces:
        return None
    runtime = cupy.cuda.runtime
    kind = runtime.memcpyDeviceToHost if out else runtime.memcpyHostToDevice
    base, size = host.ctypes.data, host.nbytes
    if out:
        touch(host)
        clock.lap("touch")
    parts: list[tuple[int, int, int]] = []  # (host offset, device pointer, bytes), in host order
    for offset, device, length in sorted(pieces):
        parts.extend((offset + at, device + at, min(PIECE_BYTES, length - at)) for at in range(0, length, PIECE_BYTES))
    streams = [cupy.cuda.Stream(non_blocking=True) for _ in range(STREAMS)]
    pinned: list[int] = []
    pinning = 0.0
    began = time.perf_counter()
    handed_over = False
    try:
        issued = 0
        for start in range(0, size, SEGMENT_BYTES):
            at = time.perf_counter()
            runtime.hostRegister(base + start, min(SEGMENT_BYTES, size - start), 0)
            pinned.append(base + start)
            pinning += time.perf_counter() - at
            ready = min(size, start + SEGMENT_BYTES)
            while issued < len(parts) and parts[issued][0] + parts[issued][2] <= ready:
                offset, device, length = parts[issued]
                destination, source = (base + offset, device) if out else (device, base + offset)
                runtime.memcpyAsync(destination, source, length, kind, streams[issued % STREAMS].ptr)
                issued += 1
        for stream in streams:
            stream.synchronize()
        clock.steps["pin"] = clock.steps.get("pin", 0.0) + pinning
        clock.steps["copy"] = clock.steps.get("copy", 0.0) + time.perf_counter() - began - pinning
        clock.restart()
        if unpin_later:
            handed_over = True
            return lambda: _unpin(runtime, pinned)
    finally:
        if not handed_over:
            for stream in streams:  # what was issued ends before its memory is unpinned
                stream.synchronize()
            _unpin(runtime, pinned)
            clock.lap("unpin")
    return None


def _unpin(runtime: Any, pinned: list[int]) -> None:
    while pinned:
        runtime.hostUnregister(pinned.pop())


class Unpins:
    """Unpins handed over by resumes (``copy_through_pinned(unpin_later=True)``), each run on a thread of its own so
    that the next cell need not wait for it; the buffer it pins is let go after it. A park waits for those under way
    first (``wait``)."""

    def __init__(self) -> None:
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()

    def later(self, unpin: Callable[[], None] | None, buffer: object = None) -> None:
        """Run ``unpin`` on a thread, ``buffer`` held until it ended."""
        if unpin is None:
            return
        thread = threading.Thread(target=_unpin_then_let_go, args=(unpin, buffer), name="gpu-magics-unpin", daemon=True)
        with self._lock:
            self._threads = [alive for alive in self._threads if alive.is_alive()]
            self._threads.append(thread)
        thread.start()

    def wait(self) -> None:
        """Until every unpin handed over has ended."""
        with self._lock:
            threads, self._threads = self._threads, []
        for thread in threads:
            thread.join()


def _unpin_then_let_go(unpin: Callable[[], None], buffer: object) -> None:
    try:
        unpin()
    except Exception as error:  # on a thread of its own: said in the log; the buffer goes all the same
        from gpu_magics.text.units import dropped

        dropped("unpinning the host memory of a resume", error)
    del buffer


UNPINS = Unpins()  # this process's
