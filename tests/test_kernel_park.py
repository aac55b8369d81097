"""The kernel's own park, step by step, on the CUDA driver's stand-in: the next execution brings it back; a
refusal or a stop during that resume leaves it parked with one line for the cell's gate, and the next execution
tries again from wherever the driver's steps got."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from gpu_magics.cluster.workers import checkpoint, kernel_park
from gpu_magics.monitor import reads_paused

GIB = 2**30


@pytest.fixture
def stand_in(monkeypatch: pytest.MonkeyPatch) -> Iterator[checkpoint.StandInCheckpoint]:
    made = checkpoint.StandInCheckpoint()
    monkeypatch.setattr(checkpoint, "_chosen", made)
    yield made
    kernel_park._parked, kernel_park._failed = None, None  # whatever a failed test left: this process runs on
    reads_paused.unpause()


def test_a_parked_kernel_holds_back_its_readings_and_the_next_execution_brings_it_back(
    stand_in: checkpoint.StandInCheckpoint, capsys: pytest.CaptureFixture[str]
) -> None:
    kernel_park.park({"GPU-a": 2 * GIB})
    assert stand_in.state(os.getpid()) == "checkpointed" and reads_paused.paused()
    kernel_park.before_execute()
    assert kernel_park.parked() is None and not reads_paused.paused()
    assert stand_in.state(os.getpid()) == "running"
    assert "%gpucluster: this kernel's 2.0 GiB of GPU memory came back in " in capsys.readouterr().out


def test_a_stop_during_the_resume_fails_the_cell_in_one_line_and_the_next_execution_resumes(
    stand_in: checkpoint.StandInCheckpoint, monkeypatch: pytest.MonkeyPatch
) -> None:
    kernel_park.park({"GPU-a": GIB})
    restore = stand_in.restore
    stops = [KeyboardInterrupt()]

    def interrupted(pid: int) -> None:
        if stops:
            raise stops.pop()
        restore(pid)

    monkeypatch.setattr(stand_in, "restore", interrupted)
    kernel_park.before_execute()
    assert kernel_park.parked() is not None  # still parked, nothing lost
    assert kernel_park.take_failure() == (
        "%gpucluster: the stop came while this kernel's GPU memory was coming back; nothing ran: run it again"
    )
    kernel_park.before_execute()  # the next execution tries again
    assert kernel_park.parked() is None and kernel_park.take_failure() is None
    assert stand_in.state(os.getpid()) == "running"


def test_a_park_the_driver_refuses_leaves_the_kernel_running_and_reading(
    stand_in: checkpoint.StandInCheckpoint, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(checkpoint.FAIL_ENV, f"checkpoint:{os.getpid()}")
    with pytest.raises(checkpoint.CheckpointError):
        kernel_park.park({"GPU-a": GIB})
    assert kernel_park.parked() is None and not reads_paused.paused()
    assert stand_in.state(os.getpid()) == "running"  # locked only, then unlocked


def test_parked_together_a_refused_worker_is_named_and_the_kernel_with_the_rest_is_parked(
    stand_in: checkpoint.StandInCheckpoint, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(checkpoint.FAIL_ENV, "checkpoint:1002")
    refused, own = kernel_park.park_together({"GPU-a": GIB}, {"w1": 1001, "w2": 1002, "rank-0": 1003})
    assert refused == {"w2": "the driver refused to checkpoint it (asked by $GPU_MAGICS_CHECKPOINT_FAIL)"}
    assert own is None and kernel_park.parked() is not None and reads_paused.paused()
    assert [stand_in.state(pid) for pid in (os.getpid(), 1001, 1002, 1003)] == [
        "checkpointed", "checkpointed", "running", "checkpointed"
    ]  # fmt: skip


def test_parked_together_a_refused_kernel_runs_on_and_the_others_are_parked(
    stand_in: checkpoint.StandInCheckpoint, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(checkpoint.FAIL_ENV, f"lock:{os.getpid()}")
    refused, own = kernel_park.park_together({"GPU-a": GIB}, {"w1": 1001})
    assert refused == {} and own == "the driver refused to lock it (asked by $GPU_MAGICS_CHECKPOINT_FAIL)"
    assert kernel_park.parked() is None and not reads_paused.paused()  # its readings go on: it was never parked
    assert stand_in.state(os.getpid()) == "running" and stand_in.state(1001) == "checkpointed"
