"""A folded reduction's aggregate computed in the kernel (``kernel_tail``): which graphs it applies to, the same
value to the bit, and ``client.get`` on a real cluster of worker processes before, during and after."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import dask
import dask.array as da
import numpy as np
import pytest
from dask.base import collections_to_expr
from dask.core import flatten
from dask.local import get_sync
from distributed import Client, LocalCluster, get_task_stream
from IPython.core.error import UsageError

from gpu_magics.gpurun import gpuless
from gpu_magics.gpurun.graphs import grouping, kernel_tail, tuning
from tests.test_graph_grouping import optimized, seed


def folded_seed(slots: int = 4) -> tuple[dict[Any, Any], list[Any]]:
    graph, keys = optimized(seed())
    return grouping.group_reduction_leaves(graph, keys, slots, fold=True), list(flatten(keys))


def test_the_folded_seeds_aggregate_splits_off_and_gives_the_same_bits() -> None:
    graph, keys = folded_seed()
    split = kernel_tail.split_tail(graph, keys)
    assert split is not None
    rest, runs = split
    assert len(runs) == 4 and set(rest) == set(runs)  # the cluster gets the runs only
    partials = get_sync(rest, runs)
    (key,) = keys
    here = graph[key](dict(zip(runs, partials, strict=True)))
    assert here == get_sync(graph, keys)[0]  # the same function on the same partial results


def test_graphs_whose_result_reads_anything_but_folded_runs_stay_whole() -> None:
    graph, keys = optimized(seed())
    assert kernel_tail.split_tail(graph, list(flatten(keys))) is None  # not folded: dask's tree
    unfolded = grouping.group_reduction_leaves(graph, keys, 4, fold=False)
    assert kernel_tail.split_tail(unfolded, list(flatten(keys))) is None  # runs, then dask's combining steps
    x = da.random.RandomState(1).random((400, 400), chunks=40)
    along, along_keys = optimized(x.sum(axis=0))
    grouped = grouping.group_reduction_leaves(along, along_keys, 4, fold=True)
    assert kernel_tail.split_tail(grouped, list(flatten(along_keys))) is None  # a reduction along one axis
    folded, folded_keys = folded_seed()
    (key,) = folded_keys
    assert kernel_tail.split_tail(folded, [key, next(iter(folded[key].dependencies))]) is None  # a run is asked for
    assert kernel_tail.split_tail(folded, ["not-in-the-graph"]) is None


def expr_of(collection: Any) -> Any:
    with dask.config.set(tuning.cluster_graph_defaults(4)):
        return collections_to_expr([collection], optimize_graph=True).optimize()


def test_only_small_unannotated_reductions_are_materialized_in_the_kernel() -> None:
    assert kernel_tail.worth_materializing(expr_of(seed()))
    with dask.annotate(retries=2):
        annotated = da.random.RandomState(1).random((400, 400), chunks=40).sum()
    assert not kernel_tail.worth_materializing(expr_of(annotated))  # layer annotations: the scheduler reads them
    assert not kernel_tail.worth_materializing(expr_of(da.ones((400, 400), chunks=40) + 1))  # no reduction
    many = da.ones((10_000, 10_000), chunks=100).sum()  # 10,000 chunks: the compact form goes to the scheduler
    assert not kernel_tail.worth_materializing(expr_of(many))
    assert not kernel_tail.worth_materializing({"a": 1})


def test_aggregate_in_kernel_reads_the_dask_config_and_a_bad_value_is_one_line() -> None:
    assert kernel_tail.enabled() is True
    with dask.config.set({"gpu-magics.aggregate-in-kernel": False}):
        assert kernel_tail.enabled() is False
    with dask.config.set({"gpu-magics.aggregate-in-kernel": 1}), pytest.raises(UsageError) as raised:
        kernel_tail.enabled()
    assert str(raised.value) == (
        "dask config gpu-magics.aggregate-in-kernel is 1: set True (a reduction's aggregate runs in the kernel, "
        "the default) or False (on a worker)"
    )
    assert "\n" not in str(raised.value)


@pytest.fixture(scope="module")
def client() -> Iterator[Client]:
    with (
        LocalCluster(n_workers=2, threads_per_worker=1, dashboard_address=None, host="127.0.0.1") as cluster,
        Client(cluster) as made,
    ):
        yield made


def computed(client: Client, collection: Any, here: bool = True) -> tuple[Any, list[str]]:
    """``collection`` computed through ``client.get`` under the cluster settings of a cell, and the prefixes of
    the tasks the workers ran."""
    from dask.utils import key_split

    with (
        dask.config.set({"scheduler": "dask.distributed", **tuning.cluster_graph_defaults(2)}),
        client.as_current(),
        kernel_tail.aggregates_here(client) if here else dask.config.set({}),
        get_task_stream(client) as stream,
    ):
        value = collection.compute()
    return value, sorted(key_split(task["key"]) for task in stream.data)


@pytest.mark.slow  # a cluster with worker processes
def test_on_a_cluster_the_workers_run_the_runs_and_the_kernel_the_aggregate(client: Client) -> None:
    value, ran = computed(client, seed())
    assert len(ran) == 2 and not any("aggregate" in prefix or "finalize" in prefix for prefix in ran)  # 2 runs
    there, ran_there = computed(client, seed(), here=False)
    assert len(ran_there) == 3  # the runs, and the aggregate (with the finalize) on a worker
    assert value == there  # to the bit
    assert isinstance(value, np.floating)  # what dask's own path gives
    assert "get" not in vars(client)  # client.get is the method again


@pytest.mark.slow  # a cluster with worker processes
def test_other_graphs_go_to_the_cluster_whole_and_persist_still_gives_futures(client: Client) -> None:
    x = da.random.RandomState(2).random((400, 400), chunks=40)
    value, ran = computed(client, x.sum(axis=0))
    assert np.allclose(value, x.sum(axis=0).compute(scheduler="sync"))
    assert len(ran) > 2  # runs and dask's combining steps, as before
    with dask.annotate(retries=1):
        annotated = da.random.RandomState(2).random((400, 400), chunks=40).mean()
    value, ran = computed(client, annotated)
    assert any("aggregate" in prefix or "finalize" in prefix for prefix in ran)  # went whole
    assert value == pytest.approx(float(annotated.compute(scheduler="sync")), rel=1e-12)
    with dask.config.set({"scheduler": "dask.distributed"}), client.as_current(), kernel_tail.aggregates_here(client):
        kept = x.persist()
        assert any(type(node).__name__ == "Future" for node in kept.dask.values())
        assert kept.sum().compute() == pytest.approx(float(x.sum().compute(scheduler="sync")), rel=1e-12)


@pytest.mark.slow  # a cluster with worker processes
def test_a_failing_run_raises_its_own_error_and_an_outer_wrapper_is_kept(client: Client) -> None:
    def boom(block: Any) -> Any:
        raise ZeroDivisionError("a chunk failed")

    bad = da.ones((400, 400), chunks=40).map_blocks(boom, dtype=float, meta=np.ones((0, 0))).sum()
    with pytest.raises(ZeroDivisionError, match="a chunk failed"):
        computed(client, bad)
    with client.as_current(), gpuless.host_results(client):
        outer = client.get
        with kernel_tail.aggregates_here(client):
            assert client.get is not outer
        assert client.get == outer  # the host-results wrapper is back
    assert "get" not in vars(client)


@pytest.mark.slow  # a cluster with worker processes
def test_a_cell_whose_every_result_came_here_has_no_gpu_work_left_to_wait_for(client: Client) -> None:
    from distributed import wait

    from gpu_magics.gpurun.timing import task_count

    def gathered_all(compute: Any) -> bool:
        before = kernel_tail.gathered()
        with task_count.recording(client) as recorded:
            compute()
            return kernel_tail.results_gathered(recorded.settled(), before)

    assert gathered_all(lambda: computed(client, seed()))  # the runs' results came here: their work was done
    assert not gathered_all(lambda: computed(client, seed(), here=False))  # the aggregate's worker: not known

    def persisted_too() -> None:
        with dask.config.set({"scheduler": "dask.distributed"}), client.as_current():
            wait(da.ones((400, 400), chunks=40).persist())  # tasks whose results stay on the workers
        computed(client, seed())

    assert not gathered_all(persisted_too)
    assert not kernel_tail.results_gathered(None, kernel_tail.gathered())  # unknown: wait
    assert not kernel_tail.results_gathered(0, kernel_tail.gathered())  # no task: nothing to skip


@pytest.mark.slow  # a cluster with worker processes
def test_under_another_wrapper_the_runs_come_back_through_it(client: Client) -> None:
    value, ran = computed(client, seed())
    with client.as_current(), gpuless.host_results(client):  # a GPU-less kernel's copies to host memory, outside
        wrapped, ran_wrapped = computed(client, seed())
    assert wrapped == value  # to the bit
    assert ran_wrapped.count("to_host") == 2 and len(ran_wrapped) == len(ran) + 2  # each run's result copied first
    assert "get" not in vars(client)
