"""A start (or restart, scale) under way: its one line at each step, its failure said once, waiting and cancelling
it; pure threads, no cluster."""

from __future__ import annotations

import threading

import pytest
from IPython.core.error import UsageError

from gpu_magics.cluster.background.starting import StartCancelled, Starting, StartProgress


def test_the_line_at_each_step() -> None:
    starting = Starting("%gpucluster", "gpu", 4, "GPU workers")
    assert starting.progress().line() == "%gpucluster: starting 'gpu': the scheduler ..."
    starting.update(phase="workers", joined=1, warm=0)
    assert starting.progress().line() == "%gpucluster: starting 'gpu': 1 of 4 GPU workers up, 0 warm ..."
    starting.update(joined=0, warm=2)  # warm heard before the count of joined workers was read again
    assert starting.progress().line() == "%gpucluster: starting 'gpu': 2 of 4 GPU workers up, 2 warm ..."
    restarting = Starting("%gpucluster", "cpu", 2, "CPU workers", "restarting")
    assert restarting.progress().line().startswith("%gpucluster: restarting 'cpu': 0 of 2 CPU workers up")
    restarting.run_here(lambda _: "info")
    assert restarting.progress().line().startswith("%gpucluster: restarted 'cpu': 2 CPU workers ready in ")
    assert restarting.wait() == "info"


def test_a_failure_is_one_line_said_once_and_listeners_hear_each_change_once() -> None:
    heard: list[StartProgress] = []
    starting = Starting("%gpucluster", "cpu", 2, "CPU workers")
    starting.listen(heard.append)

    def job(running: Starting) -> None:
        running.update(phase="workers")
        running.update(phase="workers")  # no change: not heard again
        raise UsageError("%gpucluster: the cluster did not start: a worker could not start")

    starting.run_here(job)
    assert [p.phase for p in heard] == ["workers", "failed"]
    assert heard[-1].line() == "%gpucluster: the cluster did not start: a worker could not start"
    assert starting.take_unreported() == heard[-1].line()
    assert starting.take_unreported() is None  # said once
    with pytest.raises(UsageError, match="did not start"):
        starting.wait()


def test_cancel_ends_a_start_in_the_background() -> None:
    starting = Starting("%gpucluster", "cpu", 2, "CPU workers")
    released = threading.Event()

    def job(running: Starting) -> None:
        while True:
            try:
                running.check()
            except StartCancelled:
                released.set()
                raise
            released.wait(0.01)

    starting.run_in_background(job)
    assert not starting.finished.wait(0.1)
    assert starting.cancel(timeout=60) and released.is_set()
    assert starting.progress().line() == "%gpucluster: stopped 'cpu' while it was starting"
    with pytest.raises(UsageError, match="stopped while it was starting"):
        starting.wait()
    with pytest.raises(TimeoutError):
        Starting("%gpucluster", "x", 1).wait(timeout=0.01)


def test_an_interrupted_wait_is_one_line_that_says_the_start_goes_on() -> None:
    starting = Starting("%gpucluster", "cpu", 2, "CPU workers")
    interrupt = starting.interrupted()
    assert isinstance(interrupt, KeyboardInterrupt) and getattr(interrupt, "frames_hidden", False)
    assert str(interrupt) == (
        "%gpucluster: 'cpu' goes on starting in the background; %gpucluster status shows how far it got, "
        "%gpucluster stop ends it"
    )


def test_wait_in_use_returns_once_the_client_is_in_use_and_raises_an_early_failure() -> None:
    starting = Starting("%gpucluster", "cpu", 2, "CPU workers")
    in_use = threading.Event()

    def job(running: Starting) -> str:
        running.in_use.set()
        in_use.wait(10)
        return "info"

    starting.run_in_background(job)
    starting.wait_in_use()  # returns while the job still runs
    assert not starting.finished.is_set()
    in_use.set()
    assert starting.wait(10) == "info"
    failing = Starting("%gpucluster", "cpu", 2, "CPU workers")

    def fails(_: Starting) -> None:
        raise UsageError("%gpucluster: the scheduler did not start")

    failing.run_in_background(fails)
    with pytest.raises(UsageError, match="the scheduler did not start"):
        failing.wait_in_use()
    assert failing.take_unreported() is None  # this cell said it
