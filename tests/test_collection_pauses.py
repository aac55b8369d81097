"""While a ``%%gpurun`` cell or a session's plain cell runs, young garbage is collected less often (the kernel's
graph work is not stopped again and again); the kernel's own thresholds come back after, in a real IPython shell."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from typing import Any

import dask
import pytest
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output

from gpu_magics.gpurun.graphs import collection_pauses
from tests.test_gpurun import NO_GPU, inventory
from tests.test_time_split import let_go_of_the_last_cell

KERNEL_THRESHOLDS = (900, 11, 12)  # not CPython's defaults: the test sees that these exact ones come back
READ_THRESHOLD = "t_threshold = gc.get_threshold()\n"
# Builds, optimizes and runs a graph of 400 chunks: thousands of objects alive together.
GRAPH_CELL = (
    "import dask.array as da\n"
    "t_x = da.random.RandomState(42).normal(10, 1, size=(800, 800), chunks=40)\n"
    "t_value = float((t_x + 1)[::2, ::2].mean().compute(scheduler='sync'))\n"
)


@pytest.fixture
def shell(ip: InteractiveShell) -> Iterator[InteractiveShell]:
    before = gc.get_threshold()
    gc.set_threshold(*KERNEL_THRESHOLDS)
    ip.run_cell("import gc", store_history=False)
    try:
        with inventory(NO_GPU):
            yield ip
    finally:
        with capture_output():
            ip.run_line_magic("gpurun", "off")
        gc.set_threshold(*before)


def run(ip: InteractiveShell, line: str, cell: str) -> None:
    with capture_output():
        ip.run_cell_magic("gpurun", f"{line} -q --no-monitor", cell)


def plain(ip: InteractiveShell, code: str) -> str:
    with capture_output() as captured:
        result = ip.run_cell(code)
    assert result.success, captured.stdout + captured.stderr
    return captured.stderr


def test_a_gpurun_cell_collects_young_garbage_less_often_and_the_kernels_thresholds_come_back(
    shell: InteractiveShell,
) -> None:
    run(shell, "cpu-single", READ_THRESHOLD)
    assert shell.user_ns["t_threshold"] == (collection_pauses.CELL_THRESHOLD, 11, 12)
    assert gc.get_threshold() == KERNEL_THRESHOLDS


@pytest.mark.parametrize("ending", ["raise ValueError('t_bad')", "raise KeyboardInterrupt"])
def test_a_failing_or_interrupted_cell_gives_the_kernels_thresholds_back(shell: InteractiveShell, ending: str) -> None:
    with capture_output():
        result = shell.run_cell(f"%%gpurun cpu-single -q --no-monitor\n{READ_THRESHOLD}{ending}\n")
    assert not result.success  # Jupyter is told the cell failed
    assert shell.user_ns["t_threshold"] == (collection_pauses.CELL_THRESHOLD, 11, 12)
    assert gc.get_threshold() == KERNEL_THRESHOLDS


def test_thresholds_a_cell_sets_itself_are_kept(shell: InteractiveShell) -> None:
    run(shell, "cpu-threads", "gc.set_threshold(1234, 5, 6)\n")
    assert gc.get_threshold() == (1234, 5, 6)


def test_a_kernel_that_collects_as_rarely_or_never_keeps_its_thresholds(shell: InteractiveShell) -> None:
    for own in ((collection_pauses.CELL_THRESHOLD * 2, 10, 10), (0, 10, 10)):
        gc.set_threshold(*own)
        run(shell, "cpu-single", READ_THRESHOLD)
        assert shell.user_ns["t_threshold"] == own
        assert gc.get_threshold() == own


def test_the_dask_config_sets_the_threshold_and_zero_turns_it_off(shell: InteractiveShell) -> None:
    with dask.config.set({collection_pauses.CONFIG_KEY: 20_000}):
        run(shell, "cpu-single", READ_THRESHOLD)
    assert shell.user_ns["t_threshold"] == (20_000, 11, 12)
    with dask.config.set({collection_pauses.CONFIG_KEY: 0}):
        run(shell, "cpu-single", READ_THRESHOLD)
    assert shell.user_ns["t_threshold"] == KERNEL_THRESHOLDS


def test_an_unusable_threshold_is_one_line_and_runs_nothing(shell: InteractiveShell) -> None:
    shell.user_ns["t_ran"] = False
    with dask.config.set({collection_pauses.CONFIG_KEY: "often"}), pytest.raises(UsageError) as raised:
        run(shell, "cpu-single", "t_ran = True\n")
    assert str(raised.value) == (
        "dask config gpu-magics.cell-gc-threshold is 'often': set a whole number of allocations between "
        "young-garbage collections while a cell runs, 50000 by default (0 keeps the kernel's own thresholds)"
    )
    assert shell.user_ns["t_ran"] is False
    assert gc.get_threshold() == KERNEL_THRESHOLDS


def test_a_sessions_plain_cells_collect_less_often_until_off(shell: InteractiveShell) -> None:
    with capture_output():
        shell.run_line_magic("gpurun", "cpu-single")
    plain(shell, READ_THRESHOLD)
    assert shell.user_ns["t_threshold"] == (collection_pauses.CELL_THRESHOLD, 11, 12)
    assert gc.get_threshold() == KERNEL_THRESHOLDS  # between cells: the kernel's own
    with dask.config.set({collection_pauses.CONFIG_KEY: -1}):
        said = plain(shell, READ_THRESHOLD)
    assert said.strip() == (
        "%gpurun: dask config gpu-magics.cell-gc-threshold is -1: set a whole number of allocations between "
        "young-garbage collections while a cell runs, 50000 by default (0 keeps the kernel's own thresholds)"
    )
    assert shell.user_ns["t_threshold"] == KERNEL_THRESHOLDS  # the cell ran, with the kernel's thresholds
    with capture_output():
        shell.run_line_magic("gpurun", "off")
    plain(shell, READ_THRESHOLD)
    assert shell.user_ns["t_threshold"] == KERNEL_THRESHOLDS


def test_a_graph_cell_stops_for_far_fewer_collections_than_the_same_plain_cell(shell: InteractiveShell) -> None:
    collections: list[int] = []

    def count(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            collections.append(info["generation"])

    gc.set_threshold(700, 10, 10)  # CPython's defaults
    gc.callbacks.append(count)
    try:
        plain(shell, GRAPH_CELL)
        as_plain = len(collections)
        expected = shell.user_ns["t_value"]
        collections.clear()
        run(shell, "cpu-single", GRAPH_CELL)
        under_gpurun = len(collections)
    finally:
        gc.callbacks.remove(count)
    assert shell.user_ns["t_value"] == expected
    assert as_plain >= 10
    assert under_gpurun * 5 <= as_plain, (under_gpurun, as_plain)


def _young_objects(count: int) -> list[list[None]]:
    """``count`` new container objects (generation 0's count grows by as many while they live)."""
    return [[None] for _ in range(count)]


def test_young_garbage_is_collected_once_the_work_has_left_and_only_then() -> None:
    before = gc.get_threshold()
    gc.set_threshold(*KERNEL_THRESHOLDS)
    looks: list[int] = []
    collections: list[int] = []  # per collection begun: how many looks at the work came before it

    def note(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            collections.append(len(looks))

    def dispatched_on_third_look() -> bool:
        looks.append(1)
        return len(looks) >= 3

    gc.callbacks.append(note)
    try:
        with collection_pauses.fewer_collections():
            gc.collect(0)
            collections.clear()
            few = _young_objects(KERNEL_THRESHOLDS[0] // 2)  # fewer than the kernel would collect at
            assert not collection_pauses.collect_while_waiting(lambda: True)
            many = _young_objects(KERNEL_THRESHOLDS[0] * 3)
            assert not collection_pauses.collect_while_waiting(lambda: False, wait_s=0.01)  # the work never left
            assert collections == []  # nothing collected while the scheduler might still need the GIL
            assert collection_pauses.collect_while_waiting(dispatched_on_third_look)
            assert collections == [3]  # it waited for the work to leave, then collected once
        more = _young_objects(KERNEL_THRESHOLDS[0] * 3)
        assert len(few) + len(many) + len(more) > 0
        assert not collection_pauses.collect_while_waiting(lambda: True)  # outside a cell: the kernel's own gc
    finally:
        gc.callbacks.remove(note)
        gc.set_threshold(*before)


@pytest.mark.slow  # a cluster with worker processes
def test_a_cluster_cell_collects_its_young_garbage_while_the_workers_compute(shell: InteractiveShell) -> None:
    from gpu_magics.cluster import lifecycle as cluster
    from gpu_magics.cluster import queries
    from gpu_magics.gpurun.graphs import kernel_tail

    seen: list[tuple[int, int]] = []  # per generation-0 collection: runs computing on a worker, results gathered
    scheduler: Any = None

    def note(phase: str, info: dict[str, int]) -> None:
        if phase == "start" and info["generation"] == 0 and scheduler is not None:
            runs = [task for key, task in list(scheduler.tasks.items()) if "-runs" in str(key)]
            seen.append((sum(task.state == "processing" for task in runs), kernel_tail.gathered()))

    cell = (
        "import dask.array as da\n"
        "t_x = da.random.RandomState(5).normal(10, 1, size=(4000, 4000), chunks=200)\n"
        "t_value = float((t_x + 1)[::2, ::2].mean().compute())\n"
    )
    cluster.stop()
    with capture_output():
        shell.run_line_magic("gpucluster", "--cpu-workers 2 --no-dashboard")
    try:
        run(shell, "multi-gpu", cell)  # waits for the workers; their imports
        current = queries.in_use()
        assert current is not None
        scheduler = queries.local_scheduler(current.client)
        assert scheduler is not None
        let_go_of_the_last_cell()  # the same runs again: computed again, not found still held
        before = kernel_tail.gathered()
        gc.callbacks.append(note)
        try:  # no automatic collection in the cell: its young garbage is all still pending when the runs leave
            with dask.config.set({collection_pauses.CONFIG_KEY: 10_000_000}):
                run(shell, "multi-gpu", cell)
        finally:
            gc.callbacks.remove(note)
    finally:
        cluster.stop()
    expected = float((shell.user_ns["t_x"] + 1)[::2, ::2].mean().compute(scheduler="sync"))
    assert shell.user_ns["t_value"] == pytest.approx(expected, rel=1e-12)
    assert kernel_tail.gathered() == before + 2  # the aggregate ran here on the two runs' partial results
    assert (2, before) in seen, seen  # a collection while both runs computed, before their results came back
