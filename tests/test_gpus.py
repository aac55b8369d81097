"""The one GPU inventory: built on the monitor's source, so $GPU_MAGICS_SOURCE and CUDA_VISIBLE_DEVICES act on it
as on the panels; simulated GPUs are listed but never offered to run cells."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell

from gpu_magics import gpus
from gpu_magics.gpurun import backends


@pytest.fixture
def fresh_inventory() -> Iterator[None]:
    previous = gpus.set_inventory(None)
    yield
    gpus.set_inventory(previous)


def test_fake_source_gives_simulated_gpus(monkeypatch: pytest.MonkeyPatch, fresh_inventory: None) -> None:
    monkeypatch.setenv("GPU_MAGICS_SOURCE", "fake:4")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    inventory = gpus.inventory()
    found = inventory.devices()
    assert inventory.simulated
    assert [device.index for device in found] == [0, 1, 2, 3]
    assert [device.cuda_id for device in found] == ["0", "1", "2", "3"]
    assert all(device.uuid.startswith("GPU-") and device.memory_total for device in found)
    reason = inventory.unavailable_reason()
    assert reason is not None and "simulated (GPU_MAGICS_SOURCE=fake:4)" in reason
    assert gpus.usable_devices() == ()
    assert gpus.describe(found, inventory.simulated) == "4x NVIDIA H200 (simulated)"
    assert gpus.memory_totals() == tuple(device.memory_total for device in found)


@pytest.mark.parametrize(
    ("visible", "expected"),
    [("2,3", ["2", "3"]), ("1,-1,2", ["1"]), ("", []), ("3,3", ["3"]), ("0,7", ["0"])],
)
def test_cuda_visible_devices_picks_like_cuda(
    visible: str, expected: list[str], monkeypatch: pytest.MonkeyPatch, fresh_inventory: None
) -> None:
    monkeypatch.setenv("GPU_MAGICS_SOURCE", "fake:4")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    found = gpus.inventory().devices()
    assert [device.cuda_id for device in found] == expected
    assert [device.index for device in found] == list(range(len(expected)))


def test_uuid_entries_keep_their_spelling(monkeypatch: pytest.MonkeyPatch, fresh_inventory: None) -> None:
    monkeypatch.setenv("GPU_MAGICS_SOURCE", "fake:4")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    third = gpus.inventory().devices()[2].uuid
    gpus.set_inventory(None)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", third[:12])  # a unique prefix, as CUDA allows
    found = gpus.inventory().devices()
    assert [(device.uuid, device.cuda_id) for device in found] == [(third, third[:12])]


def test_a_bad_source_setting_is_a_reason_not_a_crash(monkeypatch: pytest.MonkeyPatch, fresh_inventory: None) -> None:
    monkeypatch.setenv("GPU_MAGICS_SOURCE", "cuda")
    inventory = gpus.inventory()
    assert inventory.devices() == ()
    assert "unknown GPU source" in (inventory.unavailable_reason() or "")


def test_demo_mode_is_coherent(ip: InteractiveShell, monkeypatch: pytest.MonkeyPatch, fresh_inventory: None) -> None:
    """With fake GPUs, %%gpurun auto says why it runs on the CPU, and gpu says it in one line."""
    monkeypatch.setenv("GPU_MAGICS_SOURCE", "fake:4")
    plan = backends.plan(None)
    assert plan.name == "cpu-threads"
    assert any("simulated" in note for note in plan.notes)
    with pytest.raises(UsageError) as caught:
        backends.plan("gpu")
    message = str(caught.value)
    assert "4 GPU(s) here are simulated" in message and "\n" not in message
    assert backends.unavailable_reason("gpu") == gpus.inventory().unavailable_reason()


def test_gpumonitor_says_the_gpus_are_simulated(
    ip: InteractiveShell, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("GPU_MAGICS_SOURCE", "fake:4")
    from gpu_magics.monitor.sampler import shutdown_sampler

    shutdown_sampler()  # the next sampler reads the variable
    try:
        ip.run_line_magic("gpumonitor", "")
        text = capsys.readouterr().out
    finally:
        ip.run_line_magic("gpumonitor", "--stop")
    assert "simulated" in text and text.count("NVIDIA H200") == 4
