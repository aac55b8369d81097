"""The line ``%gpucluster`` shows when this kernel already holds a CUDA context on a GPU its workers will use:
the message, which GPUs count, and that checking calls nothing where no CUDA driver is loaded."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from gpu_magics import gpus
from gpu_magics.cluster.telemetry import process_memory
from gpu_magics.cluster.workers import kernel_context
from gpu_magics.cluster.workers.kernel_context import HeldGpu, find_held, held_message

H200 = "NVIDIA H200"
DEVICES = (
    gpus.GpuDevice(0, H200, 141 * 2**30, uuid="GPU-aaa", cuda_id="0"),
    gpus.GpuDevice(1, H200, 141 * 2**30, uuid="GPU-bbb", cuda_id="1"),
    gpus.GpuDevice(2, H200, 141 * 2**30, uuid="GPU-ccc", cuda_id="2"),
)


def never(*args: object) -> object:
    raise AssertionError("must not be called")


def test_no_held_gpu_says_nothing() -> None:
    assert held_message([]) is None


def test_one_held_gpu_is_one_line_with_its_memory() -> None:
    message = held_message([HeldGpu(0, H200, 3 * 2**29)])
    assert message is not None and "\n" not in message
    assert message.startswith("%gpucluster: this kernel already holds a CUDA context on GPU 0 (NVIDIA H200, 1.5 GiB")
    assert "a worker will use too" in message and "restart the kernel" in message


def test_several_held_gpus_and_unknown_memory() -> None:
    message = held_message([HeldGpu(0, H200, 2**30), HeldGpu(2, H200, None)])
    assert message is not None and "\n" not in message
    assert "GPU 0 (NVIDIA H200, 1.0 GiB held), GPU 2 (NVIDIA H200)" in message
    assert "workers will use too" in message


def test_without_the_cuda_driver_loaded_nothing_is_asked() -> None:
    assert find_held(["0"], DEVICES, loaded=lambda: False, contexts=never, memory=never) == []  # type: ignore[arg-type]


def test_no_active_context_needs_no_nvml_read() -> None:
    found = find_held(["0", "1"], DEVICES, loaded=lambda: True, contexts=lambda ordinals: set(), memory=never)  # type: ignore[arg-type]
    assert found == []


def test_active_context_with_memory_from_nvml() -> None:
    asked: list[Sequence[int]] = []

    def contexts(ordinals: Sequence[int]) -> set[int]:
        asked.append(list(ordinals))
        return {0}

    found = find_held(
        ["0", "1"],
        DEVICES,
        loaded=lambda: True,
        contexts=contexts,
        memory=lambda pid: {"GPU-aaa": 2**30} if pid == 4242 else {},
        pid=4242,
    )
    assert asked == [[0, 1]]  # only the GPUs the workers will use
    assert found == [HeldGpu(0, H200, 2**30)]


def test_context_memory_unknown_when_nvml_does_not_list_this_pid() -> None:
    found = find_held(["0"], DEVICES, loaded=lambda: True, contexts=lambda o: {0}, memory=lambda pid: {})
    assert found == [HeldGpu(0, H200, None)]


def test_nvml_alone_when_the_driver_cannot_be_asked() -> None:
    found = find_held(
        ["1", "2"],
        DEVICES,
        loaded=lambda: True,
        contexts=lambda o: None,
        memory=lambda pid: {"GPU-ccc": 5 * 2**20, "GPU-aaa": 2**30},  # GPU 0 is not the workers'
    )
    assert found == [HeldGpu(2, H200, 5 * 2**20)]


def test_gpus_the_workers_do_not_use_do_not_count() -> None:
    assert find_held(["GPU-zzz"], DEVICES, loaded=never, contexts=never, memory=never) == []  # type: ignore[arg-type]


def test_report_prints_one_line_to_stderr(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(gpus, "inventory", lambda: gpus.StaticInventory(DEVICES))
    monkeypatch.setattr(kernel_context, "find_held", lambda ids, devices: [HeldGpu(1, H200, 2**30)])
    kernel_context.report(["1"])
    captured = capsys.readouterr()
    assert captured.out == "" and len(captured.err.splitlines()) == 1 and "GPU 1" in captured.err


def test_report_says_nothing_when_the_check_fails(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(kernel_context, "find_held", never)
    kernel_context.report(["0"])
    assert capsys.readouterr() == ("", "")


def test_this_process_without_a_driver_holds_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    if kernel_context.cuda_loaded():
        pytest.skip("the CUDA driver is loaded in this process")
    assert find_held(["0"], DEVICES) == []


class Driver:
    """The CUDA driver's answers that ``primary_contexts`` reads (a CI machine has no libcuda): started or not,
    and which ordinals have an active primary context. ``cuInit`` must never be called."""

    def __init__(self, started: bool, active: set[int]) -> None:
        self.started = started
        self.active = active

    def cuInit(self, flags: int) -> int:
        raise AssertionError("asking must not start the driver")

    def cuDeviceGetCount(self, count: object) -> int:
        return 0 if self.started else process_memory.CUDA_ERROR_NOT_INITIALIZED

    def cuDeviceGet(self, device: object, ordinal: int) -> int:
        device._obj.value = ordinal  # type: ignore[attr-defined]
        return 0

    def cuDevicePrimaryCtxGetState(self, device: object, flags: object, active: object) -> int:
        active._obj.value = int(device.value in self.active)  # type: ignore[attr-defined]
        return 0


def test_a_driver_never_started_has_no_context_and_stays_unstarted() -> None:
    # starting it (cuInit) took 1.2 s on a 4-GPU host, in %gpucluster before any worker started
    assert process_memory.primary_contexts([0, 1], Driver(started=False, active=set())) == set()


def test_a_started_driver_says_which_devices_have_a_context() -> None:
    assert process_memory.primary_contexts([0, 1, 2], Driver(started=True, active={1})) == {1}
