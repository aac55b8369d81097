"""A parked process's NVML reads wait in the driver until it is resumed, so while the kernel is parked its own reads
are held back (``monitor.reads_paused``): they answer at once as GPUs that cannot be read, and a park first waits for
the reads under way."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

from gpu_magics.monitor import reads_paused
from gpu_magics.monitor.fake import FakeSource

SLOW_SPEC = {"pcie_delay": 0.5, "gpus": [{"name": "NVIDIA H200", "uuid": "GPU-5a0", "memory_total": 2**34,
                                          "processes": [{"pid": "self", "used_memory": 2**30}]}]}  # fmt: skip


@pytest.fixture
def unpaused() -> Iterator[None]:
    yield
    reads_paused.unpause()


def test_reads_asked_while_paused_answer_at_once_as_gpus_that_cannot_be_read(unpaused: None) -> None:
    source = FakeSource(gpus=2)
    assert all(found is not None for found in source.read_processes().values())
    assert reads_paused.pause(1.0)
    calls_before = sum(source.nvml.calls.values())
    assert source.read_processes() == {device: None for device in source.read_processes()}
    readings, _ = source.read(slow=True)
    assert len(readings) == 2 and all(reading.error == reads_paused.PARKED for reading in readings)
    assert sum(source.nvml.calls.values()) == calls_before  # NVML itself was not asked
    reads_paused.unpause()
    assert all(found is not None for found in source.read_processes().values())


def test_a_pause_waits_for_the_reads_under_way(unpaused: None) -> None:
    source = FakeSource(SLOW_SPEC)
    source.read(slow=False)  # started
    entered = threading.Event()
    read = threading.Thread(target=lambda: (entered.set(), source.read(slow=True)))  # PCIe: 2 calls of 0.5 s
    read.start()
    entered.wait(5)
    deadline = time.monotonic() + 30
    while not reads_paused._under_way and time.monotonic() < deadline:  # the read is in NVML now
        time.sleep(0.01)
    assert not reads_paused.pause(0.05)  # it is still reading
    assert reads_paused.pause(30)  # and then it ended
    read.join(30)
    readings, _ = source.read(slow=True)
    assert readings[0].error == reads_paused.PARKED
