"""A running cell's progress (elapsed time, dask tasks done / submitted) with real dask schedulers."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dask
import dask.array as da
import numpy as np
import pytest

from gpu_magics.display.live import LivePanel
from gpu_magics.gpurun.live.progress import QUIET_FOR, Progress, ProgressState
from gpu_magics.monitor.sampler import Sampler
from gpu_magics.monitor.sources import make_source
from tests.waiting import wait_for


def workload() -> float:
    x = da.random.RandomState(1).normal(10, 1, size=(400, 400), chunks=100)
    return float((x + 1)[::2, ::2].mean().compute())


@pytest.mark.parametrize("scheduler", ["synchronous", "threads"])
def test_local_schedulers_count_every_task(scheduler: str) -> None:
    progress = Progress()
    progress.start()
    try:
        with dask.config.set(scheduler=scheduler):
            workload()
            first = progress.state()
            workload()
    finally:
        progress.stop()
    state = progress.state()
    assert first.total > 16 and first.done == first.total
    assert state.total == 2 * first.total and state.done == state.total
    workload()  # after stop(), nothing is counted
    assert progress.state().total == state.total


@pytest.fixture(scope="module")
def client() -> Iterator[object]:
    distributed = pytest.importorskip("distributed")
    with (
        distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None) as cluster,
        distributed.Client(cluster) as client,
    ):
        yield client


def test_cluster_counts_reach_the_total(client: object) -> None:
    workload()  # on the client: tasks finished before start() are not this cell's
    progress = Progress(client)  # type: ignore[arg-type]
    progress.start()
    try:
        assert progress.state().total == 0
        value = workload()
        progress.refresh()
        state = progress.state()
    finally:
        progress.stop()
    assert value == pytest.approx(11.0, rel=0.05)
    assert state.total > 16 and state.done == state.total
    assert f"{state.done} / {state.total} dask tasks" in state.text()


def test_cluster_progress_polls_in_the_background(client: object) -> None:
    import time

    progress = Progress(client)  # type: ignore[arg-type]
    progress.start()
    try:
        workload()
        deadline = time.monotonic() + 10
        while progress.state().total == 0 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert progress.state().total > 16
    finally:
        progress.stop()
    assert progress._thread is None


def test_short_cells_stay_quiet() -> None:
    now = [100.0]
    progress = Progress(clock=lambda: now[0])
    progress.start()
    try:
        now[0] += QUIET_FOR / 2
        assert progress.text() is None
        now[0] += QUIET_FOR
        assert progress.text() == "1.50 s elapsed"  # no dask task yet: only the time
        with dask.config.set(scheduler="synchronous"):
            workload()
        text = progress.text()
    finally:
        progress.stop()
    assert text is not None and text.startswith("1.50 s elapsed · ") and text.endswith(" dask tasks")
    done, total = text.split(" · ")[1].split(" dask")[0].split(" / ")
    assert done == total


def test_state_text() -> None:
    assert ProgressState(9.123, 120, 1238).text() == "9.12 s elapsed · 120 / 1,238 dask tasks"
    assert ProgressState(0.5, 3, 2).text() == "500 ms elapsed · 2 / 2 dask tasks"  # never more than submitted
    assert ProgressState(6.02, 0, 2, 180, 400).text() == "6.02 s elapsed · 0 / 2 dask tasks · 180 / 400 chunks"


def gated(block: Any, directory: str) -> Any:
    """A chunk that marks itself, then waits for ``directory``/open unless it is among the first two to begin: at
    least one chunk finishes, the rest wait for the test (two worker threads: the first to count sees <= 2)."""
    marks = Path(directory)
    (marks / f"began-{uuid.uuid4().hex}").touch()
    if len(list(marks.glob("began-*"))) > 2:
        wait_for(lambda: (marks / "open").exists(), timeout=120, what="the test to open the gate", step=0.02)
    return block


def test_a_folded_reductions_chunks_are_counted_before_its_one_task_per_worker_ends(
    client: Any, tmp_path: Path
) -> None:
    """Each worker runs one task for 20 chunks (``folding``): the chunks done show while the tasks run."""
    from gpu_magics.gpurun.graphs.tuning import cluster_graph_defaults

    progress = Progress(client)
    progress.start()
    try:
        with dask.config.set(cluster_graph_defaults(slots=2)):
            x = da.ones((40, 10), chunks=(1, 10)).map_blocks(gated, str(tmp_path), meta=np.empty((0, 0)))
            future = client.compute(x.sum())
        running = wait_for(
            lambda: (state := progress.state()).chunks_done > 0 and state, timeout=120, what="a chunk counted"
        )
        assert not future.done() and running.done == 0 and running.chunks_total == 40, running
        assert " chunks" in running.text() and running.text().endswith(f"{running.chunks_done} / 40 chunks")
        (tmp_path / "open").touch()
        assert future.result(timeout=120) == 400
        progress.refresh()
        state = progress.state()
    finally:
        (tmp_path / "open").touch()
        progress.stop()
    assert state.chunks_done == state.chunks_total == 40 and state.done == state.total == 3  # 2 runs, 1 aggregate


def test_chunk_counts_in_the_scheduler_come_from_events_and_finished_runs() -> None:
    from dask._task_spec import Task

    from gpu_magics.gpurun.graphs import run_stop
    from gpu_magics.gpurun.graphs.grouping import together
    from gpu_magics.gpurun.graphs.run_progress import ChunkCount

    run = Task(("r", 0), together, *(run_stop.chunk_task(Task(None, abs, -i)) for i in range(5)))
    count = ChunkCount()
    count.entered(("r", 0), run)
    count.entered(("r", 0), run)  # entered again (a retry): counted once
    count.entered("other", Task("other", abs, -1))  # not a run
    assert (count.done, count.total) == (0, 5)
    count.reported({"key": ["r", 0], "done": 2})  # msgpack makes the key a list
    count.reported({"key": ["r", 0], "done": 1})  # late and older: nothing taken back
    count.reported({"key": ["gone", 0], "done": 3})
    assert (count.done, count.total) == (2, 5)
    count.reported({"key": ["r", 0], "done": 9})  # a rerun's count: never more than the run has
    count.finished(("r", 0))
    assert (count.done, count.total) == (5, 5)


def test_live_panel_shows_the_progress_under_its_title() -> None:
    class Fixed:
        stopped = False

        def text(self) -> str | None:
            return "9.12 s elapsed · 120 / 238 dask tasks"

        def stop(self) -> None:
            self.stopped = True

    sampler = Sampler(make_source("fake", gpus=1))
    sampler.tick()
    progress = Fixed()
    panel = LivePanel(sampler, title="gpu · 1x Fake", progress=progress)
    bundle = panel._repr_mimebundle_()
    html = bundle["text/html"]
    assert html.index("gpu · 1x Fake") < html.index("120 / 238 dask tasks") < html.index("GPU 0")
    assert bundle["text/plain"].splitlines()[:2] == ["gpu · 1x Fake", "9.12 s elapsed · 120 / 238 dask tasks"]
    panel.start()
    panel.stop()
    assert progress.stopped
