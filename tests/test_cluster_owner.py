"""The cluster's one owner thread: changes run there one after another, their results and errors come back to the
thread that asked, what they ask to run afterwards runs on the asking thread, and an event posted from any thread is
handled on the owner. The last test starts and stops a real cluster (LocalCluster processes) from two threads and
checks every change of the state was made on the owner."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from types import SimpleNamespace
from typing import cast

import pytest

from gpu_magics.cluster.background.starting import Starting
from gpu_magics.cluster.control import kernel_cluster, owner
from gpu_magics.cluster.control.machine.events import (
    Event,
    Instruction,
    SchedulerAnswered,
    StartAsked,
    StartEnded,
    TakeIntoUse,
    TellListeners,
)
from gpu_magics.cluster.control.verbs import start, stop
from gpu_magics.cluster.options import parse_cluster_line
from gpu_magics.cluster.reading.running import ActiveCluster


def test_a_change_runs_on_the_owner_and_its_result_comes_back() -> None:
    seen: list[str] = []

    def action() -> int:
        seen.append(threading.current_thread().name)
        return 42

    assert owner.change(action) == 42
    assert seen == [owner.THREAD_NAME]
    assert not owner.on_owner()


def test_a_change_that_fails_raises_in_the_thread_that_asked_and_the_owner_goes_on() -> None:
    def failing() -> None:
        raise ValueError("no such worker")

    with pytest.raises(ValueError, match="no such worker"):
        owner.change(failing)
    assert owner.change(lambda: "still serving") == "still serving"


def test_a_change_asked_on_the_owner_runs_at_once_instead_of_waiting_for_itself() -> None:
    def outer() -> tuple[bool, str]:
        return owner.on_owner(), owner.change(lambda: threading.current_thread().name)

    assert owner.change(outer) == (True, owner.THREAD_NAME)


def test_what_a_change_asks_afterwards_runs_on_the_asking_thread_once_the_change_is_made() -> None:
    order: list[tuple[str, str]] = []

    def action() -> None:
        owner.afterwards(lambda: order.append(("afterwards", threading.current_thread().name)))
        order.append(("change", threading.current_thread().name))

    owner.change(action)
    assert order == [("change", owner.THREAD_NAME), ("afterwards", threading.current_thread().name)]


def test_changes_from_many_threads_run_one_at_a_time() -> None:
    inside = 0
    most = 0

    def action() -> None:
        nonlocal inside, most
        inside += 1
        most = max(most, inside)
        time.sleep(0.002)
        inside -= 1

    threads = [threading.Thread(target=lambda: [owner.change(action) for _ in range(5)]) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert most == 1


def test_an_event_is_handled_on_the_owner_and_its_listeners_hear_on_the_posters_thread() -> None:
    handled: list[str] = []
    heard: list[tuple[object, str]] = []
    original = kernel_cluster.KernelCluster.handle

    def recording(self: kernel_cluster.KernelCluster, event: Event) -> list[Instruction]:
        handled.append(threading.current_thread().name)
        return original(self, event)

    nothing_beside = SimpleNamespace(attached={}, services=list)  # a cluster stand-in with no service beside it
    start, cluster = Starting("%gpucluster", "heard", 1), cast(ActiveCluster, nothing_beside)
    remove = owner.on_change(lambda current: heard.append((current, threading.current_thread().name)))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(kernel_cluster.KernelCluster, "handle", recording)
        patch.setattr(owner, "_carriers", {})  # what taking a real cluster into use sets: not this stand-in's
        try:
            assert owner.post(StartAsked(start, owner.view().generation)) == []
            assert owner.post(SchedulerAnswered(start, cluster)) == [
                TellListeners(cluster),
                TakeIntoUse(start, cluster),
            ]
            assert owner.post(StartEnded(start, failed=False)) == [TellListeners(None)]
        finally:
            remove()
    here = threading.current_thread().name
    assert handled == [owner.THREAD_NAME] * 3 and heard == [(cluster, here), (None, here)]
    assert owner.view().phase is kernel_cluster.phase() is kernel_cluster.Phase.IDLE


@pytest.fixture
def owner_changes(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The threads every change of the kernel's cluster (its phase, the cluster in use) ran on."""
    threads: list[str] = []
    move, use = kernel_cluster.KernelCluster._move, kernel_cluster.KernelCluster._use

    def recording_move(self: kernel_cluster.KernelCluster, *args: object) -> None:
        threads.append(threading.current_thread().name)
        move(self, *args)  # type: ignore[arg-type]

    def recording_use(self: kernel_cluster.KernelCluster, cluster: ActiveCluster | None) -> list[Instruction]:
        threads.append(threading.current_thread().name)
        return use(self, cluster)

    monkeypatch.setattr(kernel_cluster.KernelCluster, "_move", recording_move)
    monkeypatch.setattr(kernel_cluster.KernelCluster, "_use", recording_use)
    yield threads
    stop.stop()


@pytest.mark.slow  # a real cluster with a worker process
def test_a_real_start_and_a_stop_from_another_thread_change_the_state_on_the_owner_only(
    owner_changes: list[str],
) -> None:
    options = parse_cluster_line("--cpu-workers 1 --name owned")
    info = start.start(options, telemetry_interval=0)
    assert info.name == "owned" and kernel_cluster.in_use() is not None
    assert kernel_cluster.phase() is kernel_cluster.Phase.IN_USE
    said: list[str] = []
    stopper = threading.Thread(target=lambda: said.append(stop.stop()), name="a-stopping-thread")
    stopper.start()
    stopper.join(60)
    assert said == ["%gpucluster: stopped cluster 'owned'"]
    assert kernel_cluster.in_use() is None and kernel_cluster.under_way() is None
    assert kernel_cluster.phase() is kernel_cluster.Phase.IDLE
    assert len(owner_changes) >= 5  # starting, in use (cluster and phase), closing (phase and cluster), idle
    assert set(owner_changes) == {owner.THREAD_NAME}
