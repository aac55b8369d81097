"""A cell costs what it does: an empty quiet ``%%gpurun`` cell starts no sampler and, on a cluster whose scheduler
runs in this process, asks neither the scheduler nor the workers anything; a longer one is still watched.
Behaviour only: the times themselves are measured by ``benchmarks/session_backend.py --empty-only``."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from distributed import Client
from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output

from gpu_magics.cluster.control import queries
from gpu_magics.cluster.reading import inspection
from gpu_magics.gpurun import backends
from gpu_magics.gpurun.live.cell_monitor import QUIET_SAMPLING_AFTER_S, CellMonitor, later
from gpu_magics.monitor.sampler import Sampler
from gpu_magics.monitor.sources import make_source
from tests.test_gpurun import NO_GPU, inventory
from tests.waiting import wait_for

TASKS_CELL = "import dask.array as da\nda.ones(10, chunks=5).sum().compute()"


def sampler_started(sampler: Sampler) -> list[bool]:
    """A record, in order, of each ``start()`` of ``sampler``."""
    started: list[bool] = []
    original = sampler.start

    def start() -> None:
        started.append(True)
        original()

    sampler.start = start  # type: ignore[method-assign]
    return started


def test_a_short_quiet_cell_starts_no_sampler_and_a_long_one_is_sampled(ip: InteractiveShell) -> None:
    sampler = Sampler(make_source("fake", gpus=2), interval=0.1)
    started = sampler_started(sampler)
    plan = backends.BackendPlan(name="gpu", hardware="2x Fake", chunk_type="cupy", gpu_indices=(0,))
    held, ran = threading.Event(), threading.Event()
    later.call(0, lambda: held.wait(120))  # the timer waits: the short cell ends before what is due for it runs
    try:
        short = CellMonitor(ip, show_live=False, sampler=sampler, lazy=True)
        short.start(plan)
        later.call(QUIET_SAMPLING_AFTER_S, ran.set)  # due after the short cell's call: runs after it
        figures = short.stop()
    finally:
        held.set()
    assert started == [] and figures.samples == 0 and not sampler.running
    assert ran.wait(120)  # what was due for it ran, and found it stopped
    assert started == [] and not sampler.running
    long = CellMonitor(ip, show_live=False, sampler=sampler, lazy=True)
    began = time.time()
    long.start(plan)
    wait_for(lambda: started == [True] and len(sampler.history(since=began)) >= 2, 120, "the long cell sampled")
    figures = long.stop()
    assert started == [True] and figures.samples >= 2 and not sampler.running
    watched = CellMonitor(ip, show_live=False, sampler=sampler)  # not lazy (-o keeps its figures): from the start
    watched.start(plan)
    assert watched.stop().samples >= 1 and started == [True, True]


@pytest.fixture(scope="module")
def shell(loaded_shell: InteractiveShell) -> Iterator[InteractiveShell]:
    """The loaded test shell with a 2-worker CPU cluster, for the class below."""
    with inventory(NO_GPU), capture_output():
        loaded_shell.run_line_magic("gpucluster", "--cpu-workers 2 --name cost --replace")
        yield loaded_shell
        loaded_shell.run_line_magic("gpucluster", "stop")


@pytest.mark.slow
class TestOnACluster:
    def test_an_empty_quiet_cell_asks_the_cluster_nothing(
        self, shell: InteractiveShell, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        client = queries.require_client()
        asked: list[str] = []
        for verb in ("run_on_scheduler", "run", "scheduler_info"):
            original = getattr(client, verb)

            def counting(*args: Any, _verb: str = verb, _original: Any = original, **kwargs: Any) -> Any:
                asked.append(_verb)
                return _original(*args, **kwargs)

            monkeypatch.setattr(client, verb, counting)
        with capture_output() as captured:
            shell.run_cell_magic("gpurun", "multi-gpu -q", "x = 1")
        assert asked == [], captured.stdout
        with capture_output():  # a cell with tasks still counts them: read where the scheduler runs
            shell.run_cell_magic(
                "gpurun", "multi-gpu -q -o r", "import dask.array as da\nda.ones(10, chunks=5).sum().compute()"
            )
        assert shell.user_ns["r"].tasks and shell.user_ns["r"].tasks >= 2

    def test_a_cluster_cells_plan_reads_the_workers_once(
        self, shell: InteractiveShell, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Their count, their GPUs and the hardware line come from one reading (one round trip to a remote
        scheduler); the next plan reads them again."""
        read: list[Any] = []
        original = inspection._scheduler_workers

        def counting(client: Any) -> Any:
            read.append(client)
            return original(client)

        monkeypatch.setattr(inspection, "_scheduler_workers", counting)
        with capture_output():
            shell.run_cell_magic("gpurun", "multi-gpu -q -o r", "x = 1")
        assert "2 CPU workers" in shell.user_ns["r"].hardware
        assert read == [queries.require_client()]
        with capture_output():
            shell.run_cell_magic("gpurun", "multi-gpu -q", "x = 1")
        assert len(read) == 2

    def test_a_cluster_cells_plan_does_not_read_what_this_kernel_holds(self, shell: InteractiveShell) -> None:
        """The plan's hardware line and GPU workers come from the workers' reports alone: what this kernel holds
        on the GPUs (NVML's process list, its pools), which ``%gpucluster status`` shows, is not read per cell."""
        current = queries.in_use()
        assert current is not None and current.telemetry is not None
        asked: list[int] = []
        original = current.telemetry.kernel_held

        def counted() -> Any:
            asked.append(1)
            return original() if original is not None else {}

        current.telemetry.kernel_held = counted
        try:
            for _ in range(3):
                with capture_output():
                    shell.run_cell_magic("gpurun", "multi-gpu -q -o r", "x = 1")
            assert "2 CPU workers" in shell.user_ns["r"].hardware and asked == []
            current.telemetry.others(current.telemetry.members())  # where it is asked for, it is read
            assert asked == [1]
        finally:
            current.telemetry.kernel_held = original

    def test_the_scheduler_is_read_in_place_only_where_it_runs_here(self, shell: InteractiveShell) -> None:
        client = queries.require_client()
        assert queries.local_scheduler(client) is queries.active().cluster.scheduler  # type: ignore[union-attr]
        attached = Client(client.scheduler.address, timeout=10, set_as_default=False)
        try:
            assert queries.local_scheduler(attached) is None
        finally:
            attached.close()
        assert threading.current_thread() is threading.main_thread()
