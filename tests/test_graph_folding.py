"""A whole-array reduction folded into its runs (``folding``): which reductions fold, the tasks they become, and
values equal to dask's own tree to 1e-12 relative (dask's sync scheduler runs both graphs here)."""

from __future__ import annotations

from typing import Any

import dask
import dask.array as da
import numpy as np
import pytest
from dask.core import flatten
from dask.local import get_sync
from IPython.core.error import UsageError

from gpu_magics.gpurun.graphs import folding, grouping, run_stop, tuning
from tests.test_graph_grouping import layers, optimized, seed


def runs_of(graph: dict[Any, Any]) -> list[Any]:
    return [key for key in graph if str(key[0]).endswith("-runs")]


def values(graph: dict[Any, Any], keys: Any) -> Any:
    return get_sync(graph, list(flatten(keys)))[0]


def test_the_seed_folds_into_a_run_per_gpu_and_one_aggregate_reading_them() -> None:
    graph, keys = optimized(seed())
    folded = grouping.group_reduction_leaves(graph, keys, 4, fold=True)
    runs = runs_of(folded)
    assert len(runs) == 4 and len(folded) == 4 + 1  # no combining step left: the aggregate reads the 4 runs
    assert sorted(len(folded[key].args) - 2 for key in runs) == [25] * 4  # every chunk once, split evenly
    assert all(folded[key].func is folding.fold_run for key in runs)
    assert all(chunk.func is run_stop.chunk for key in runs for chunk in folded[key].args[2:])  # stops once released
    (aggregate,) = (key for key in folded if key not in runs)
    assert folded[aggregate].dependencies == set(runs)
    assert values(folded, keys) == pytest.approx(values(graph, keys), rel=1e-12)


def test_a_deeper_tree_folds_the_same_and_one_gpu_gets_one_run() -> None:
    graph, keys = optimized(seed(chunks=25))  # 1,600 chunks: dask's tree has three levels
    assert sum(1 for name in layers(graph) if "-partial" in name) >= 2
    for slots in (1, 3):
        folded = grouping.group_reduction_leaves(graph, keys, slots, fold=True)
        assert len(runs_of(folded)) == slots and len(folded) == slots + 1
        assert values(folded, keys) == pytest.approx(values(graph, keys), rel=1e-12)


@pytest.mark.parametrize(
    "make",
    [
        lambda x: x.sum(),
        lambda x: x.min(),
        lambda x: x.max(),
        lambda x: x.var(),
        lambda x: x.std(),  # dask fuses the aggregate with its square root
        lambda x: (x > 0.5).any(),
        lambda x: (x > 0.01).all(),
        lambda x: da.nanmean(x),
        lambda x: x.sum(keepdims=True),
    ],
)
def test_whole_array_reductions_fold_with_their_value(make: Any) -> None:
    x = da.random.RandomState(5).random((1000, 1000), chunks=100)
    graph, keys = optimized(make(x))
    folded = grouping.group_reduction_leaves(graph, keys, 4, fold=True)
    assert len(runs_of(folded)) == 4 and not any("-partial" in name for name in layers(folded))
    assert len(folded) <= 4 + 2  # the runs, the aggregate (and, for std, the result's own name)
    np.testing.assert_allclose(values(folded, keys), values(graph, keys), rtol=1e-12)


@pytest.mark.parametrize(
    "make",
    [
        lambda x: x.sum(axis=0),  # along one axis: each column block its own reduction
        lambda x: da.argmin(x),  # the first of equal values depends on the order: not folded
        lambda x: da.reduction(
            x, np.sum, np.sum, combine=lambda b, axis, keepdims: np.sum(b, axis, keepdims=keepdims), dtype=float
        ),  # a combining function of the user's own
    ],
)
def test_other_reductions_keep_dasks_tree_in_runs(make: Any) -> None:
    x = da.random.RandomState(5).random((1000, 1000), chunks=100)
    graph, keys = optimized(make(x))
    folded = grouping.group_reduction_leaves(graph, keys, 4, fold=True)
    assert folded.keys() == grouping.group_reduction_leaves(graph, keys, 4).keys()  # grouped, not folded
    assert any("-partial" in name for name in layers(folded))
    np.testing.assert_array_equal(values(folded, keys), values(graph, keys))


def test_two_reductions_in_one_compute_keep_dasks_tree() -> None:
    x = da.random.RandomState(5).random((1000, 1000), chunks=100)
    graph, keys = optimized(da.stack([x.sum(), x.max()]))
    folded = grouping.group_reduction_leaves(graph, keys, 4, fold=True)
    assert any("-partial" in name for name in layers(folded))


def test_fold_reductions_reads_the_dask_config_and_a_bad_value_is_one_line() -> None:
    assert grouping.fold_reductions() is True
    with dask.config.set({"gpu-magics.fold-reductions": False}):
        assert grouping.fold_reductions() is False
    with dask.config.set({"gpu-magics.fold-reductions": "yes"}), pytest.raises(UsageError) as raised:
        grouping.fold_reductions()
    assert str(raised.value).startswith("dask config gpu-magics.fold-reductions is 'yes': set True")
    assert "\n" not in str(raised.value)


def test_a_fold_run_combines_its_values_nested_one_level_per_axis() -> None:
    seen: list[Any] = []

    def combine(nested: Any) -> str:
        seen.append(nested)
        return "combined"

    assert folding.fold_run(combine, 2, "a", "b", "c") == "combined"
    assert seen == [[["a", "b", "c"]]]
    folding.fold_run(combine, 1, "a")
    assert seen[-1] == ["a"]


def test_the_results_name_is_given_to_the_task_it_aliases_one_task_fewer() -> None:
    from dask._expr import FinalizeCompute
    from dask._task_spec import Alias
    from dask.base import collections_to_expr

    x = da.random.RandomState(5).random((1000, 1000), chunks=100)
    with dask.config.set(tuning.cluster_graph_defaults(4)):
        expr = FinalizeCompute(collections_to_expr([x.sum()], optimize_graph=True)).optimize()
        graph, keys = dict(expr.__dask_graph__()), expr.__dask_keys__()
    (name,) = flatten(keys)
    assert not isinstance(graph[name], Alias) and graph[name].key == name  # the result's task has its name
    assert len(graph) == 4 + 1  # the runs, the aggregate fused with the finalize: no alias left
    with dask.config.set(scheduler="sync"):
        assert get_sync(graph, [name])[0] == pytest.approx(float(x.sum().compute()), rel=1e-12)
