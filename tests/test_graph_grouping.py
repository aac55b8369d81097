"""A reduction's leaves in a few tasks per worker thread (``grouping``): which graphs change, the tasks they get,
and results that stay the same to the last bit (dask's own sync scheduler runs both graphs here)."""

from __future__ import annotations

import collections
from typing import Any

import dask
import dask.array as da
import numpy as np
import pytest
from dask.base import collections_to_expr
from dask.core import flatten
from dask.local import get_sync
from IPython.core.error import UsageError

from gpu_magics.gpurun.graphs import grouping, tuning


def optimized(collection: Any) -> tuple[dict[Any, Any], list[Any]]:
    """The graph dask sends for ``collection`` in a ``multi-gpu`` cell (before grouping), and its keys."""
    with dask.config.set(tuning.cluster_graph_defaults()):
        expr = collections_to_expr([collection], optimize_graph=True).optimize()
        return dict(expr.__dask_graph__()), expr.__dask_keys__()


def layers(graph: dict[Any, Any]) -> dict[str, int]:
    return dict(collections.Counter(key[0] if isinstance(key, tuple) else key for key in graph))


def seed(chunks: int = 100, split_every: int = tuning.REDUCTION_SPLIT_EVERY) -> Any:
    with dask.config.set(split_every=split_every):
        x = da.random.RandomState(42).normal(10, 1, size=(1000, 1000), chunks=chunks)
        return (x + 1)[::2, ::2].mean()


def test_runs_are_one_per_gpu_where_leaves_are_many_enough() -> None:
    assert grouping.runs_for(100, 4) == 4
    assert grouping.runs_for(100, 4, per_slot=2) == 8
    assert grouping.runs_for(100, 1) == 1  # one GPU: one task queues every chunk's kernels back to back
    assert grouping.runs_for(10, 4, per_slot=3) == 5  # at least 2 leaves a run; still a run per GPU at least
    assert grouping.runs_for(6, 4) == 0  # fewer leaves than runs worth making: as it is
    assert grouping.runs_for(100, 4, per_slot=0) == 0  # gpu-magics.runs-per-slot: 0 turns it off
    assert grouping.runs_for(0, 4) == 0


def test_the_seeds_hundred_chunk_tasks_become_a_run_per_gpu_with_the_same_bits() -> None:
    graph, keys = optimized(seed())
    assert len(graph) == 100 + 9 + 1  # a task per chunk, 9 combining steps, the aggregate
    by_gpu = grouping.group_reduction_leaves(graph, keys, 4)
    assert sorted(len(node.args) for key, node in by_gpu.items() if str(key[0]).endswith("-runs")) == [25] * 4
    grouped = grouping.group_reduction_leaves(graph, keys, 4, per_slot=2)
    counts = layers(grouped)
    runs = {name: count for name, count in counts.items() if name.endswith("-runs")}
    assert list(runs.values()) == [8] and len(grouped) == 8 + 9 + 1
    sizes = [len(node.args) for key, node in grouped.items() if key[0] in runs]
    assert sorted(sizes) == [12, 12, 12, 12, 13, 13, 13, 13]  # every chunk once, split evenly
    names = list(flatten(keys))
    assert get_sync(grouped, names) == get_sync(graph, names)  # the same draws and the same tree: the same value


def test_runs_of_other_settings_have_other_keys() -> None:
    """A key names one value: the same graph grouped for another number of runs, or folded, must not reuse a run
    that the scheduler may still hold from the cell before."""
    graph, keys = optimized(seed())

    def run_keys(grouped: dict[Any, Any]) -> set[Any]:
        return {key for key in grouped if str(key[0]).endswith("-runs")}

    on_four = run_keys(grouping.group_reduction_leaves(graph, keys, 4))
    on_two = run_keys(grouping.group_reduction_leaves(graph, keys, 2))
    folded = run_keys(grouping.group_reduction_leaves(graph, keys, 4, fold=True))
    assert len(on_four) == 4 and len(on_two) == 2 and len(folded) == 4
    assert not on_four & on_two and not on_four & folded and not on_two & folded
    assert on_four == run_keys(grouping.group_reduction_leaves(graph, keys, 4))  # the same settings: the same keys


def test_every_leaf_is_computed_once_and_each_step_reads_its_own_leaves() -> None:
    graph, keys = optimized(seed(chunks=(100, 250), split_every=4))
    grouped = grouping.group_reduction_leaves(graph, keys, 3, per_slot=2)
    run_keys = [key for key in grouped if str(key[0]).endswith("-runs")]
    assert len(run_keys) == 6 and sum(len(grouped[key].args) for key in run_keys) == 40
    for key, node in grouped.items():
        if key not in run_keys:
            assert node.dependencies <= set(grouped)  # nothing reads a leaf that is gone
    names = list(flatten(keys))
    assert get_sync(grouped, names) == get_sync(graph, names)


@pytest.mark.parametrize(
    "make",
    [
        lambda x: x + 1,  # each chunk is a result the kernel asks for
        lambda x: x.rechunk((50, 1000)).sum(),  # the chunks feed a rechunk before the reduction
        lambda x: x.map_overlap(lambda block: block, depth=1, boundary="none").sum(),  # neighbours read them
    ],
)
def test_leaves_that_feed_anything_but_a_reduction_step_keep_a_task_each(make: Any) -> None:
    x = da.random.RandomState(0).random((1000, 1000), chunks=100)
    graph, keys = optimized(make(x))
    grouped = grouping.group_reduction_leaves(graph, keys, 4)
    assert not [name for name in layers(grouped) if name.endswith("-runs")]
    assert grouped.keys() == graph.keys()


def test_an_axis_reduction_is_grouped_too_and_its_value_unchanged() -> None:
    x = da.random.RandomState(7).random((800, 600), chunks=(100, 60))
    graph, keys = optimized(x.std(axis=0))
    grouped = grouping.group_reduction_leaves(graph, keys, 2, per_slot=2)
    assert [count for name, count in layers(grouped).items() if name.endswith("-runs")] == [4]
    names = list(flatten(keys))
    np.testing.assert_array_equal(get_sync(grouped, names)[0], get_sync(graph, names)[0])


def test_grouping_turned_off_or_a_high_level_graph_leaves_the_graph_as_it_is() -> None:
    graph, keys = optimized(seed())
    assert grouping.group_reduction_leaves(graph, keys, 4, per_slot=0) is graph
    assert grouping.group_reduction_leaves(graph, keys, 0) is graph
    high_level = seed().__dask_graph__()
    assert grouping.group_reduction_leaves(high_level, keys, 4) is high_level


@pytest.mark.parametrize("said", ["two", -1, 1.5, True])
def test_a_runs_per_slot_setting_that_is_not_a_whole_number_is_one_line(said: object) -> None:
    with dask.config.set({"gpu-magics.runs-per-slot": said}), pytest.raises(UsageError) as raised:
        grouping.runs_per_slot()
    message = str(raised.value)
    assert message.startswith(f"dask config gpu-magics.runs-per-slot is {said!r}: set a whole number")
    assert "\n" not in message


def test_runs_per_slot_reads_the_dask_config() -> None:
    assert grouping.runs_per_slot() == grouping.RUNS_PER_SLOT
    for said in (0, 2):
        with dask.config.set({"gpu-magics.runs-per-slot": said}):
            assert grouping.runs_per_slot() == said


def test_each_chunk_of_a_run_looks_whether_the_run_was_released_first() -> None:
    """Outside a worker's task nothing is released and the chunk runs; a worker's cancelled or forgotten task
    stops the run before its next chunk (``run_stop``; the real interrupt: tests/test_interrupt_stops_work.py)."""
    import types

    from distributed.utils import thread_state

    from gpu_magics.gpurun.graphs import run_progress, run_stop

    graph, keys = optimized(seed())
    grouped = grouping.group_reduction_leaves(graph, keys, 4, fold=False)
    runs = [node for key, node in grouped.items() if str(key[0]).endswith("-runs")]
    assert runs and all(chunk.func is run_stop.chunk for run in runs for chunk in run.args)
    assert run_stop.chunk(divmod, 7, 2) == (3, 1)

    tasks: dict[str, Any] = {"run": types.SimpleNamespace(state="executing")}
    events: list[tuple[str, Any]] = []  # a chunk done says so to the scheduler (``run_progress``), the first at once
    state = types.SimpleNamespace(tasks=tasks)
    worker = types.SimpleNamespace(state=state, log_event=lambda *said: events.append(said))
    thread_state.key, thread_state.execution_state = "run", {"worker": worker}
    try:
        assert run_stop.chunk(divmod, 7, 2) == (3, 1)
        assert events == [(run_progress.TOPIC, {"key": "run", "done": 1})]
        tasks["run"].state = "cancelled"  # the worker's state once the scheduler let go of the task
        with pytest.raises(run_stop.RunReleased):
            run_stop.chunk(divmod, 7, 2)
        del tasks["run"]  # forgotten
        assert run_stop.released()
    finally:
        del thread_state.key, thread_state.execution_state
