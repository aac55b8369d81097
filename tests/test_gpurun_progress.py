"""A running cell's progress (elapsed time, dask tasks done / submitted) with real dask schedulers."""

from __future__ import annotations

from collections.abc import Iterator

import dask
import dask.array as da
import pytest

from gpu_magics.display.live import LivePanel
from gpu_magics.gpurun.live.progress import QUIET_FOR, Progress, ProgressState
from gpu_magics.monitor.sampler import Sampler
from gpu_magics.monitor.sources import make_source


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
