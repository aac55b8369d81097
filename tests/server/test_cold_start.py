"""A cold server with a slow first GPU read (a slow NVML init, held here until the test lets it end): ``/devices``
answers while it is under way with a "starting" placeholder, and the websocket brings the first real snapshot when
the read ends. After the sampler's standby (no
one watched), the first requests get a reading taken then, processes included, not the last one before it."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from typing import Any

import pytest

from gpu_magics.monitor.fake import FakeSource
from gpu_magics.monitor.models import GpuReading
from gpu_magics.server import service as service_module
from gpu_magics.server.config import GpuMagicsServer
from gpu_magics.server.handlers import SERVICE_KEY
from gpu_magics.server.service import STALE_STATUS, STARTING_STATUS, MonitorService

from .test_websocket import WS_PATH, receive

HELD_S = 300.0  # how long the first read is held at most: far beyond every bound below, so none passes by it
PATIENCE = 60.0  # seconds a request may take on a busy machine; a request that waited for the read takes HELD_S


class SlowFirstRead:
    """A ``FakeSource`` whose first read blocks, as a slow NVML does, until ``release`` (or ``close``; at most
    ``HELD_S``)."""

    def __init__(self, gpus: int) -> None:
        self._source = FakeSource(gpus=gpus)
        self._release = threading.Event()
        self._first = True
        self.first_read_done: float | None = None  # time.monotonic()

    def read(self, *, slow: bool) -> tuple[tuple[GpuReading, ...], str | None]:
        if self._first:
            self._first = False
            self._release.wait(HELD_S)
            self.first_read_done = time.monotonic()
        return self._source.read(slow=slow)

    def release(self) -> None:
        self._release.set()

    def close(self) -> None:
        self._release.set()
        self._source.close()


@pytest.fixture
def slow_service(jp_serverapp: Any) -> tuple[MonitorService, list[SlowFirstRead]]:
    """The server's monitor service, replaced by one whose source reads slowly the first time."""
    sources: list[SlowFirstRead] = []

    def factory(config: GpuMagicsServer) -> SlowFirstRead:
        sources.append(SlowFirstRead(config.fake_gpus))
        return sources[-1]

    service = MonitorService(GpuMagicsServer(parent=jp_serverapp), source_factory=factory)
    jp_serverapp.web_app.settings[SERVICE_KEY] = service
    return service, sources


async def _devices(jp_fetch: Any) -> dict[str, Any]:
    response = await jp_fetch("gpu-magics", "api", "devices")
    reply: dict[str, Any] = json.loads(response.body)
    return reply


async def test_first_devices_answers_before_the_first_read(
    slow_service: tuple[MonitorService, list[SlowFirstRead]], jp_fetch: Any
) -> None:
    _, sources = slow_service
    reply = await asyncio.wait_for(_devices(jp_fetch), PATIENCE)
    assert reply["snapshot"]["status"] == STARTING_STATUS
    assert reply["snapshot"]["gpus"] == []
    assert reply["config"]["source"] == "fake"
    assert sources and sources[0].first_read_done is None  # the read was still under way
    sources[0].release()

    deadline = time.monotonic() + PATIENCE
    while not (reply := await _devices(jp_fetch))["snapshot"]["gpus"]:
        assert time.monotonic() < deadline, "no real snapshot after the slow first read"
        await asyncio.sleep(0.1)
    assert len(reply["snapshot"]["gpus"]) == 2
    assert reply["snapshot"]["status"] is None


async def test_websocket_hello_is_immediate_then_the_first_real_snapshot(
    slow_service: tuple[MonitorService, list[SlowFirstRead]], jp_ws_fetch: Any
) -> None:
    _, sources = slow_service
    ws = await asyncio.wait_for(jp_ws_fetch(*WS_PATH), PATIENCE)
    hello = await asyncio.wait_for(receive(ws, "hello"), PATIENCE)
    assert hello["snapshot"]["status"] == STARTING_STATUS
    assert sources and sources[0].first_read_done is None  # said while the read was still under way
    sources[0].release()
    first = await asyncio.wait_for(receive(ws, "snapshot"), PATIENCE)
    assert len(first["snapshot"]["gpus"]) == 2
    assert first["snapshot"]["time"] > hello["snapshot"]["time"]  # a panel keeps it: newer than the placeholder
    ws.close()


async def test_current_waits_briefly_latest_waits_for_the_read() -> None:
    sources: list[SlowFirstRead] = []

    def factory(config: GpuMagicsServer) -> SlowFirstRead:
        sources.append(SlowFirstRead(config.fake_gpus))
        return sources[-1]

    service = MonitorService(GpuMagicsServer(source="fake", fake_gpus=1, interval=0.1), source_factory=factory)
    try:
        placeholder = await asyncio.wait_for(service.current(), PATIENCE)
        assert placeholder.status == STARTING_STATUS and placeholder.gpus == ()
        assert sources and sources[0].first_read_done is None  # the read is still under way
        latest = asyncio.ensure_future(service.latest())  # waits for the read
        await asyncio.sleep(0.5)
        assert not latest.done()
        sources[0].release()
        real = await asyncio.wait_for(latest, PATIENCE)
        assert len(real.gpus) == 1 and real.time > placeholder.time
        assert (await service.current(wait=0)).gpus  # once read, the real one
    finally:
        service.close()


async def test_a_fast_first_read_is_served_without_a_placeholder() -> None:
    service = MonitorService(GpuMagicsServer(source="fake", fake_gpus=1, interval=0.1))
    try:
        snapshot = await asyncio.wait_for(service.current(), 5)
        assert snapshot.status is None and len(snapshot.gpus) == 1
    finally:
        service.close()


@pytest.fixture
def standby_service(jp_serverapp: Any) -> MonitorService:
    """The server's monitor service on two fake GPUs, standing by 0.3 s after its last use (the server's: 60 s);
    its processes are read every 10 min, so only a fresh full reading has them."""
    config = GpuMagicsServer(parent=jp_serverapp, slow_interval=600.0)
    service = MonitorService(config, idle_timeout=0.3)
    jp_serverapp.web_app.settings[SERVICE_KEY] = service
    return service


async def _after_standby(service: MonitorService, jp_fetch: Any) -> float:
    """Use the service, wait for its standby (bounded: 60 s), and say when it was (``time.time()``)."""
    assert (await _devices(jp_fetch))["snapshot"]["gpus"]
    deadline = time.monotonic() + 60
    while service.running:
        assert time.monotonic() < deadline, "the sampler never stood by"
        await asyncio.sleep(0.05)
    return time.time()


async def test_the_first_devices_after_a_standby_is_read_then(standby_service: MonitorService, jp_fetch: Any) -> None:
    before = (await _devices(jp_fetch))["snapshot"]
    assert before["gpus"] and all(gpu["processes"] is None for gpu in before["gpus"])  # not read yet
    asked = await _after_standby(standby_service, jp_fetch)
    reply = await _devices(jp_fetch)
    assert reply["snapshot"]["time"] >= asked, (reply["snapshot"]["time"], asked)  # not the one before the standby
    assert reply["snapshot"]["status"] is None
    assert all(gpu["processes"] is not None for gpu in reply["snapshot"]["gpus"])  # a full reading


async def test_the_first_processes_after_a_standby_are_read_then(
    standby_service: MonitorService, jp_fetch: Any
) -> None:
    asked = await _after_standby(standby_service, jp_fetch)
    response = await jp_fetch("gpu-magics", "api", "processes")
    reply = json.loads(response.body)
    assert reply["time"] >= asked and reply["unreadable_gpus"] == []
    assert {process["pid"] for process in reply["processes"]} == {4000, 4001}  # the fake GPUs' processes


class HeldReads(SlowFirstRead):
    """A ``FakeSource`` whose reads wait while ``held`` is set (until ``release``)."""

    def __init__(self, gpus: int) -> None:
        super().__init__(gpus)
        self._first = False
        self.held = threading.Event()

    def read(self, *, slow: bool) -> tuple[tuple[GpuReading, ...], str | None]:
        if self.held.is_set():
            self._release.wait(120)
        return self._source.read(slow=slow)

    def release(self) -> None:
        self.held.clear()
        self._release.set()


async def test_a_late_read_after_a_standby_says_how_old_the_snapshot_is(monkeypatch: pytest.MonkeyPatch) -> None:
    """When the fresh reading takes longer than a request waits, the request gets the old snapshot, its status
    saying how old it is; the reading, when it comes, serves the next requests."""
    sources: list[HeldReads] = []

    def factory(config: GpuMagicsServer) -> HeldReads:
        sources.append(HeldReads(config.fake_gpus))
        return sources[-1]

    monkeypatch.setattr(service_module, "STANDBY_READ_WAIT", 0.5)
    config = GpuMagicsServer(source="fake", fake_gpus=1, interval=0.1)
    service = MonitorService(config, source_factory=factory, idle_timeout=0.3)
    try:
        old = await asyncio.wait_for(service.latest(), 30)
        deadline = time.monotonic() + 60
        while service.running:
            assert time.monotonic() < deadline, "the sampler never stood by"
            await asyncio.sleep(0.05)
        stood_by = time.time()
        sources[0].held.set()
        stale = await asyncio.wait_for(service.current(), 30)
        assert old.time <= stale.time < stood_by and len(stale.gpus) == 1  # the last one before the standby
        assert stale.status is not None and stale.status.startswith(f"{STALE_STATUS}: read "), stale.status
        assert " s ago" in stale.status
        sources[0].release()
        deadline = time.monotonic() + 60
        while (fresh := await service.current()).status is not None:  # the held reading, once it ends
            assert time.monotonic() < deadline, fresh.status
        assert fresh.time > old.time and fresh.gpus
    finally:
        service.close()
