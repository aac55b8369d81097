"""This process's NVML reads, held back while it is parked (``%gpucluster park`` parks the kernel too): the driver
makes a parked process's NVML reads wait until it is resumed, and a thread waiting there may hold a lock that the
resume needs. A read asked while paused answers at once as a GPU that cannot be read now; ``pause`` waits for the
reads under way to end first."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

PARKED = "this process is parked (%gpucluster park): its GPU readings wait until it is resumed"
_changed = threading.Condition()
_under_way = 0
_paused = False


class Paused(Exception):
    """A read asked while this process is parked."""


@contextlib.contextmanager
def reading() -> Iterator[None]:
    """Around one read of NVML: ``Paused`` at once while paused."""
    global _under_way
    with _changed:
        if _paused:
            raise Paused
        _under_way += 1
    try:
        yield
    finally:
        with _changed:
            _under_way -= 1
            _changed.notify_all()


def pause(timeout_s: float) -> bool:
    """Hold back new reads; whether the reads under way ended within ``timeout_s``."""
    global _paused
    with _changed:
        _paused = True
        return _changed.wait_for(lambda: _under_way == 0, timeout_s)


def unpause() -> None:
    global _paused
    with _changed:
        _paused = False


def paused() -> bool:
    return _paused
