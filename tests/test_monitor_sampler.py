"""Sampler with real threads over the fake NVML binding: buffer, subscribers, cadences, lifecycle."""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from gpu_magics.monitor import (
    GpuReading,
    HostReading,
    Sampler,
    Snapshot,
    get_sampler,
    shutdown_sampler,
    summarize,
)
from gpu_magics.monitor.fake import FakeSource
from gpu_magics.monitor.sources import default_source

SPEC_PATH = Path(__file__).parent / "data" / "fake_gpus.json"
PATIENCE = 20.0  # seconds; generous for a loaded machine, only reached when something is wrong


def sampler_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("gpu-magics-sampler")]


def wait_for(condition: Callable[[], bool], timeout: float = PATIENCE) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.01)
    return condition()


@pytest.fixture
def make() -> Iterator[Callable[..., Sampler]]:
    """Builds samplers over fake sources (manual ticks) and closes them after the test."""
    made: list[Sampler] = []

    def build(spec: Any = None, *, gpus: int = 2, **options: Any) -> Sampler:
        source = FakeSource(spec, gpus=None if spec is not None else gpus, tick_seconds=None)
        sampler = Sampler(source, **options)
        made.append(sampler)
        return sampler

    yield build
    for sampler in made:
        sampler.close()
    assert not sampler_threads()


@pytest.mark.parametrize("name", ["interval", "slow_interval"])
@pytest.mark.parametrize("value", [0.05, 0, -1, float("nan"), float("inf")])
def test_intervals_below_the_minimum_are_refused(make: Callable[..., Sampler], name: str, value: float) -> None:
    with pytest.raises(ValueError, match=rf"{name} must be a number of seconds >= 0.1"):
        make(**{name: value})
    sampler = make()
    with pytest.raises(ValueError, match=rf"{name} must be a number of seconds >= 0.1"):
        setattr(sampler, name, value)
    setattr(sampler, name, 0.1)
    assert getattr(sampler, name) == 0.1


def test_history_must_be_positive(make: Callable[..., Sampler]) -> None:
    with pytest.raises(ValueError, match="history"):
        make(history=0)


def test_tick_takes_a_full_snapshot(make: Callable[..., Sampler]) -> None:
    sampler = make(SPEC_PATH)
    assert sampler.latest() is None
    snapshot = sampler.tick()
    assert sampler.latest() is snapshot and sampler.history() == [snapshot]
    assert snapshot.status is None and len(snapshot.gpus) == 5
    first = snapshot.gpus[0]
    assert first.memory_used == 2**30 and first.pcie_rx is not None and first.processes is not None
    host = snapshot.host
    assert isinstance(host, HostReading) and host.cpu_count >= 1
    assert host.memory_total and host.memory_used and 0 < host.memory_used <= host.memory_total
    data = json.loads(json.dumps(snapshot.to_json()))
    assert data["gpus"][0]["uuid"] == first.uuid and data["host"]["cpu_count"] == host.cpu_count
    assert data["status"] is None and data["time"] == snapshot.time


def test_host_cpu_percent_is_a_percentage(make: Callable[..., Sampler]) -> None:
    sampler = make()
    sampler.tick()
    sum(i * i for i in range(200_000))  # let some CPU time pass
    percent = sampler.tick().host.cpu_percent
    assert percent is None or 0.0 <= percent <= 100.0


def test_buffer_is_bounded(make: Callable[..., Sampler]) -> None:
    sampler = make(history=5)
    taken = [sampler.tick() for _ in range(12)]
    assert sampler.history() == taken[-5:]
    assert sampler.latest() is taken[-1]


def test_history_since(make: Callable[..., Sampler]) -> None:
    sampler = make()
    taken = [sampler.tick() for _ in range(4)]
    assert sampler.history(since=taken[1].time) == [s for s in taken if s.time > taken[1].time]
    assert sampler.history(since=taken[-1].time) == []
    assert sampler.history(since=0) == taken


def test_subscribers_get_each_snapshot_until_unsubscribed(make: Callable[..., Sampler]) -> None:
    sampler = make()
    got: list[Snapshot] = []
    unsubscribe = sampler.subscribe(got.append)
    first, second = sampler.tick(), sampler.tick()
    unsubscribe()
    unsubscribe()  # twice is harmless
    sampler.tick()
    assert got == [first, second]


def test_slow_fields_read_only_when_due_without_threads(make: Callable[..., Sampler]) -> None:
    sampler = make(gpus=1, slow_interval=3600)
    nvml = sampler.source.nvml  # type: ignore[attr-defined]
    first = sampler.tick()
    second = sampler.tick()
    assert nvml.calls["nvmlDeviceGetPcieThroughput"] == 2  # rx and tx, once
    assert second.gpus[0].pcie_rx == first.gpus[0].pcie_rx is not None  # merged from the slow read
    sampler.slow_interval = 0.1
    time.sleep(0.15)
    sampler.tick()
    assert nvml.calls["nvmlDeviceGetPcieThroughput"] == 4


def test_threads_sample_and_are_gone_after_stop(make: Callable[..., Sampler]) -> None:
    sampler = make(interval=0.1, slow_interval=0.1)
    sampler.start()
    sampler.start()  # idempotent
    assert sampler.running
    assert sorted(t.name for t in sampler_threads()) == ["gpu-magics-sampler", "gpu-magics-sampler-slow"]
    assert all(t.daemon for t in sampler_threads())
    assert wait_for(lambda: len(sampler.history()) >= 3)
    sampler.stop()
    assert not sampler.running and not sampler_threads()
    count = len(sampler.history())
    time.sleep(0.3)
    assert len(sampler.history()) == count  # nothing samples after stop()
    sampler.start()  # and it starts again
    assert wait_for(lambda: len(sampler.history()) > count)
    sampler.stop()
    assert not sampler_threads()


def test_slow_reads_never_delay_fast_ticks(make: Callable[..., Sampler]) -> None:
    sampler = make(gpus=1, interval=0.1, slow_interval=0.1)
    nvml = sampler.source.nvml  # type: ignore[attr-defined]
    slow_started, release = threading.Event(), threading.Event()

    def block_slow_read() -> None:
        slow_started.set()
        release.wait(PATIENCE)

    nvml.hooks["nvmlDeviceGetPcieThroughput"] = block_slow_read
    during: list[Snapshot] = []
    sampler.subscribe(lambda s: during.append(s) if slow_started.is_set() and not release.is_set() else None)
    sampler.start()
    assert slow_started.wait(PATIENCE)
    # the slow thread is stuck in a PCIe call; fast snapshots keep coming
    assert wait_for(lambda: len(during) >= 3)
    assert all(s.gpus[0].pcie_rx is None for s in during)  # no slow values yet
    assert all(s.gpus[0].memory_used is not None for s in during)
    release.set()
    assert wait_for(lambda: (last := sampler.latest()) is not None and last.gpus[0].pcie_rx is not None)
    latest = sampler.latest()
    assert latest is not None and latest.gpus[0].processes is not None


def test_sleeping_slow_reads_leave_fast_ticks_going(make: Callable[..., Sampler]) -> None:
    """Fast snapshots are taken while a slow read sleeps in its PCIe call (an odd count of PCIe calls: the first
    of a slow read's two has begun, the second not yet)."""
    spec = {"pcie_delay": 0.5, "gpus": [{"uuid": "GPU-1"}]}  # one slow read: two 0.5 s PCIe calls
    sampler = make(spec, interval=0.1, slow_interval=0.1)
    nvml = sampler.source.nvml  # type: ignore[attr-defined]
    during: dict[int, int] = {}  # the count of PCIe calls -> fast snapshots taken at that count

    def count(snapshot: Snapshot) -> None:
        calls = nvml.calls["nvmlDeviceGetPcieThroughput"]
        during[calls] = during.get(calls, 0) + 1

    sampler.subscribe(count)
    sampler.start()
    # two fast snapshots at one odd count: one was taken wholly within a slow read
    assert wait_for(lambda: any(n >= 2 for calls, n in list(during.items()) if calls % 2))
    sampler.stop()


def test_interval_change_applies_at_once(make: Callable[..., Sampler]) -> None:
    sampler = make(interval=3600, slow_interval=3600)
    sampler.start()
    assert wait_for(lambda: len(sampler.history()) == 1)
    sampler.interval = 0.1  # would otherwise wait an hour
    assert wait_for(lambda: len(sampler.history()) >= 3)


def test_failing_subscriber_does_not_stop_sampling(
    make: Callable[..., Sampler], caplog: pytest.LogCaptureFixture
) -> None:
    sampler = make(interval=0.1)
    good: list[Snapshot] = []

    def bad(snapshot: Snapshot) -> None:
        raise RuntimeError("subscriber bug")

    sampler.subscribe(bad)
    sampler.subscribe(good.append)
    sampler.start()
    assert wait_for(lambda: len(good) >= 3)
    assert sampler.running
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1 and "subscriber" in errors[0].getMessage()  # logged once, not per snapshot


def test_stop_from_a_subscriber(make: Callable[..., Sampler]) -> None:
    sampler = make(interval=0.1)
    sampler.subscribe(lambda snapshot: sampler.stop())
    sampler.start()
    assert wait_for(lambda: not sampler_threads())
    assert not sampler.running


class _BrokenSource:
    def __init__(self) -> None:
        self.closed = False

    def read(self, *, slow: bool) -> tuple[tuple[GpuReading, ...], str | None]:
        raise RuntimeError("boom")

    def close(self) -> None:
        self.closed = True


def test_a_raising_source_is_a_status_not_a_dead_thread() -> None:
    source = _BrokenSource()
    sampler = Sampler(source, interval=0.1)
    snapshot = sampler.tick()
    assert snapshot.gpus == () and snapshot.status == "reading GPUs failed: RuntimeError: boom"
    sampler.start()
    try:
        assert wait_for(lambda: len(sampler.history()) >= 3)
        assert sampler.running
    finally:
        sampler.close()
    assert source.closed and not sampler_threads()


def test_lost_gpu_mid_run_keeps_the_sampler_and_other_gpus(make: Callable[..., Sampler]) -> None:
    spec = {"gpus": [{"uuid": "GPU-1"}, {"uuid": "GPU-2", "lost_at_tick": 1}]}
    sampler = make(spec, interval=0.1, slow_interval=0.1)
    sampler.start()
    assert wait_for(lambda: len(sampler.history()) >= 2)
    sampler.source.nvml.advance()  # type: ignore[attr-defined]
    assert wait_for(lambda: (s := sampler.latest()) is not None and s.gpus[1].error == "GPU is lost")
    latest = sampler.latest()
    assert latest is not None and latest.status is None
    assert latest.gpus[0].error is None and latest.gpus[0].memory_used is not None
    assert latest.gpus[1].pcie_rx is None  # no stale slow values on a lost GPU
    assert sampler.running


def test_shared_sampler(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPU_MAGICS_SOURCE", "fake:3")
    shutdown_sampler()
    try:
        sampler = get_sampler()
        assert get_sampler() is sampler
        assert isinstance(sampler.source, FakeSource)
        assert len(sampler.tick().gpus) == 3
        sampler.start()
        assert wait_for(lambda: len(sampler.history()) >= 2)
    finally:
        shutdown_sampler()
    assert not sampler.running and not sampler_threads()
    assert get_sampler() is not sampler
    shutdown_sampler()


def test_default_source_from_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPU_MAGICS_SOURCE", f"fake:{SPEC_PATH}")
    assert len(default_source().read(slow=False)[0]) == 5
    monkeypatch.setenv("GPU_MAGICS_SOURCE", "nvml")
    assert type(default_source()).__name__ == "NvmlSource"
    monkeypatch.setenv("GPU_MAGICS_SOURCE", "cuda")
    with pytest.raises(ValueError, match="unknown GPU source"):
        default_source()


def _reading(index: int, **values: Any) -> GpuReading:
    base: dict[str, Any] = {f: None for f in GpuReading.__dataclass_fields__ if f not in {"index", "name", "uuid"}}
    base.update(index=index, name="GPU", uuid=f"GPU-{index}")
    base.update(values)
    return GpuReading(**base)


def test_summarize_peaks_and_means() -> None:
    host = HostReading(None, None, None, 1)
    snapshots = [
        Snapshot(1.0, (_reading(0, memory_used=10, gpu_util=20.0, power=100.0), _reading(1)), host, None),
        Snapshot(2.0, (_reading(0, memory_used=30, gpu_util=None, power=300.0), _reading(1)), host, None),
        Snapshot(3.0, (_reading(0, memory_used=20, gpu_util=60.0, memory_total=80), _reading(1)), host, None),
        Snapshot(4.0, (_reading(1, error="GPU is lost"),), host, None),
    ]
    summary = summarize(snapshots)
    assert sorted(summary) == [0, 1]
    first = summary[0]
    assert first.samples == 3 and first.peak_memory_used == 30 and first.memory_total == 80
    assert first.mean_gpu_util == pytest.approx(40.0) and first.peak_gpu_util == 60.0
    assert first.mean_power == pytest.approx(200.0) and first.peak_power == 300.0
    assert first.error is None
    second = summary[1]
    assert second.samples == 4 and second.peak_memory_used is None and second.mean_gpu_util is None
    assert second.error == "GPU is lost"
    assert json.loads(json.dumps(first.to_json()))["peak_memory_used"] == 30
    assert summarize([]) == {}


def test_summarize_pcie_and_nvlink_both_ways() -> None:
    """The links' throughput during a window: received plus sent, peak and mean; unknown stays unknown."""
    host = HostReading(None, None, None, 1)
    gib = 2.0**30
    snapshots = [
        Snapshot(1.0, (_reading(0, pcie_rx=1 * gib, pcie_tx=1 * gib, nvlink_rx=0.0, nvlink_tx=0.0),), host, None),
        Snapshot(2.0, (_reading(0, pcie_rx=6 * gib, pcie_tx=2 * gib),), host, None),
    ]
    (summary,) = summarize(snapshots).values()
    assert summary.peak_pcie == 8 * gib and summary.mean_pcie == pytest.approx(5 * gib)
    assert summary.peak_nvlink == 0.0 and summary.mean_nvlink == 0.0  # read once, as zero
    from gpu_magics.gpurun.live.cell_monitor import figures_from

    line = str(figures_from(snapshots, "gpu", 0.0))
    assert line.endswith(", PCIe peak 8.0 GiB/s (mean 5.0 GiB/s), NVLink peak 0 B/s (mean 0 B/s)")
    (unknown,) = summarize([Snapshot(1.0, (_reading(0, gpu_util=5.0),), host, None)]).values()
    assert unknown.peak_pcie is None and unknown.peak_nvlink is None
    assert "PCIe" not in str(figures_from([Snapshot(1.0, (_reading(0, gpu_util=5.0),), host, None)], "gpu", 0.0))
