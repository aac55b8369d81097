"""A cold server with a slow first GPU read (a slow NVML init): ``/devices`` answers at once with a "starting"
placeholder, and the websocket brings the first real snapshot when the read ends."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from typing import Any

import pytest

from gpu_magics.monitor.fake import FakeSource
from gpu_magics.monitor.models import GpuReading
from gpu_magics.server.config import GpuMagicsServer
from gpu_magics.server.handlers import SERVICE_KEY
from gpu_magics.server.service import STARTING_STATUS, MonitorService

from .test_websocket import WS_PATH, receive

FIRST_READ_DELAY = 4.0  # seconds the first read blocks, as a slow NVML does


class SlowFirstRead:
    """A ``FakeSource`` whose first read blocks ``FIRST_READ_DELAY`` seconds (released early by ``close``)."""

    def __init__(self, gpus: int) -> None:
        self._source = FakeSource(gpus=gpus)
        self._release = threading.Event()
        self._first = True
        self.first_read_done: float | None = None  # time.monotonic()

    def read(self, *, slow: bool) -> tuple[tuple[GpuReading, ...], str | None]:
        if self._first:
            self._first = False
            self._release.wait(FIRST_READ_DELAY)
            self.first_read_done = time.monotonic()
        return self._source.read(slow=slow)

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
    started = time.monotonic()
    reply = await asyncio.wait_for(_devices(jp_fetch), FIRST_READ_DELAY)
    elapsed = time.monotonic() - started
    assert elapsed < FIRST_READ_DELAY / 2, elapsed
    assert reply["snapshot"]["status"] == STARTING_STATUS
    assert reply["snapshot"]["gpus"] == []
    assert reply["config"]["source"] == "fake"
    assert sources and sources[0].first_read_done is None  # the read was still under way

    deadline = time.monotonic() + FIRST_READ_DELAY + 10
    while not (reply := await _devices(jp_fetch))["snapshot"]["gpus"]:
        assert time.monotonic() < deadline, "no real snapshot after the slow first read"
        await asyncio.sleep(0.1)
    assert len(reply["snapshot"]["gpus"]) == 2
    assert reply["snapshot"]["status"] is None


async def test_websocket_hello_is_immediate_then_the_first_real_snapshot(
    slow_service: tuple[MonitorService, list[SlowFirstRead]], jp_ws_fetch: Any
) -> None:
    started = time.monotonic()
    ws = await asyncio.wait_for(jp_ws_fetch(*WS_PATH), FIRST_READ_DELAY)
    hello = await asyncio.wait_for(receive(ws, "hello"), FIRST_READ_DELAY)
    assert time.monotonic() - started < FIRST_READ_DELAY / 2
    assert hello["snapshot"]["status"] == STARTING_STATUS
    first = await asyncio.wait_for(receive(ws, "snapshot"), FIRST_READ_DELAY + 10)
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
        started = time.monotonic()
        placeholder = await service.current()
        assert time.monotonic() - started < FIRST_READ_DELAY / 2
        assert placeholder.status == STARTING_STATUS and placeholder.gpus == ()
        real = await asyncio.wait_for(service.latest(), FIRST_READ_DELAY + 10)
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
