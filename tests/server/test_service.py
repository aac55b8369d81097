"""The shared sampler: lazy start, interval chosen by listeners, idle stop, config clamping."""

from __future__ import annotations

import asyncio

import pytest
from traitlets import TraitError

from gpu_magics.server.config import GpuMagicsServer
from gpu_magics.server.service import MonitorService


def _service(**config: object) -> MonitorService:
    settings: dict[str, object] = {"source": "fake", "fake_gpus": 1, "interval": 1.0}
    settings.update(config)
    return MonitorService(GpuMagicsServer(**settings), idle_timeout=0.3)


def test_config_clamps_and_checks() -> None:
    assert GpuMagicsServer(interval=0.001).interval == 0.1
    with pytest.raises(TraitError):
        GpuMagicsServer(interval=float("nan"))
    with pytest.raises(TraitError):
        GpuMagicsServer(history=0)
    with pytest.raises(TraitError):
        GpuMagicsServer(fake_gpus=65)


def test_config_defaults_from_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPU_MAGICS_SOURCE", "fake:3")
    config = GpuMagicsServer()
    assert (config.source, config.fake_gpus) == ("fake", 3)
    monkeypatch.delenv("GPU_MAGICS_SOURCE")
    assert GpuMagicsServer().source == "nvml"


async def test_lazy_start_listener_interval_and_idle_stop() -> None:
    service = _service()
    assert not service.running  # nothing sampled before first use
    seen: list[float] = []
    subscription = service.add_listener(lambda snapshot: seen.append(snapshot.time))
    assert service.running
    sampler = service.ensure_started()
    assert sampler.interval == 1.0
    subscription.set_interval(0.2)
    assert sampler.interval == pytest.approx(0.2)
    subscription.set_interval(5.0)  # a slower listener never slows the server's own interval
    assert sampler.interval == 1.0
    subscription.set_interval(0.2)
    await asyncio.sleep(0.7)
    assert len(seen) >= 2  # delivered on the event loop
    subscription.remove()
    assert sampler.interval == 1.0
    await asyncio.sleep(0.8)
    assert not service.running  # idle: stopped
    assert (await service.latest()).gpus  # and started again on demand
    service.close()
    assert not service.running
