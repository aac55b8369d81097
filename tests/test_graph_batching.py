"""A reduction's chunk tasks gathered into one task per GPU worker (``gpurun.graphs.batching``): the graph's shape,
the same result to the bit, graphs it must leave alone, and where the batches run on a real cluster (CPU workers
stand for GPU workers here: the rewrite does not look at the chunks' type)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

import dask
import dask.array as da
import numpy as np
import pytest

from gpu_magics.gpurun.graphs import batching, tuning


def seed(chunks: int = 100) -> da.Array:
    """The seed workload, small; its reduction tree made as a multi-gpu cell makes it (``split_every`` 16)."""
    x = da.random.RandomState(3).normal(10, 1, size=(1000, 1000), chunks=chunks)
    with dask.config.set(split_every=tuning.REDUCTION_SPLIT_EVERY):
        return (x + 1)[::2, ::2].mean()


def tuned(collection: da.Array, batches: int) -> tuple[dict[object, object], list[object]]:
    keys = collection.__dask_keys__()
    with dask.config.set({batching.LEAF_BATCHES_KEY: batches}):
        return dict(tuning.optimize_without_aliases(collection.__dask_graph__(), keys)), keys


def names(graph: dict[object, object]) -> Counter[str]:
    return Counter(str(key[0] if isinstance(key, tuple) else key).rsplit("-", 1)[0] for key in graph)


def test_the_seeds_chunks_become_one_task_per_gpu_worker_with_the_same_result() -> None:
    y = seed()
    plain, keys = tuned(y, 0)
    batched, _ = tuned(y, 4)
    assert names(plain) == {"add-getitem-normal-mean_chunk": 100, "mean_combine-partial": 9, "mean_agg-aggregate": 1}
    assert names(batched) == {"gpu-magics-batch": 4, "mean_combine-partial": 9, "mean_agg-aggregate": 1}
    sizes = [len(node.dependencies) for node in batched.values()]  # type: ignore[attr-defined]
    assert len(batched) == 14 and sizes.count(0) == 4  # the batches read nothing
    assert dask.get(batched, keys) == dask.get(plain, keys)  # the same chunks, the same tree: the same bits


@pytest.mark.parametrize("batches", [1, 3, 7])
def test_batches_are_nearly_equal_and_a_partial_reduction_stays_exact(batches: int) -> None:
    x = da.random.RandomState(5).normal(0, 1, size=(900, 900), chunks=100)
    z = x.sum(axis=0)
    plain, keys = tuned(z, 0)
    batched, _ = tuned(z, batches)
    gathered = [node for key, node in batched.items() if str(key[0]).startswith("gpu-magics-batch")]  # type: ignore[index]
    sizes = sorted(len(node.args) for node in gathered)  # type: ignore[attr-defined]
    assert len(gathered) == batches and sum(sizes) == 81 and sizes[-1] - sizes[0] <= 1
    assert np.array_equal(np.concatenate(dask.get(batched, keys)), np.concatenate(dask.get(plain, keys)))


def test_graphs_without_a_reduction_or_with_too_few_chunks_are_left_alone() -> None:
    x = da.random.RandomState(5).normal(0, 1, size=(400, 400), chunks=100)
    elementwise = x + 1  # its chunks are the result: nothing reads them
    plain, _ = tuned(elementwise, 0)
    assert tuned(elementwise, 4)[0] == plain
    few = seed(chunks=500)  # 4 chunks: fewer than two a batch for 4 GPU workers
    assert tuned(few, 4)[0] == tuned(few, 0)[0]
    matmul = x @ x.T  # chunks read by a contraction, not by dask's tree reduction
    assert names(tuned(matmul, 4)[0]) == names(tuned(matmul, 0)[0])


def test_the_setting_follows_the_gpu_workers_and_the_users_config_wins() -> None:
    assert tuning.cluster_graph_defaults(4)[batching.LEAF_BATCHES_KEY] == 4
    assert batching.LEAF_BATCHES_KEY not in tuning.cluster_graph_defaults(0)  # CPU workers: a task per chunk
    with dask.config.set({batching.LEAF_BATCHES_KEY: 0}):
        assert batching.LEAF_BATCHES_KEY not in tuning.cluster_graph_defaults(4)
    with dask.config.set(array_optimize=lambda dsk, keys, **kwargs: dsk):
        assert tuning.cluster_graph_defaults(4) == {"split_every": tuning.REDUCTION_SPLIT_EVERY}


@pytest.fixture(scope="module")
def client() -> Iterator[object]:
    from distributed import Client, LocalCluster

    with (
        LocalCluster(n_workers=2, threads_per_worker=2, processes=True, dashboard_address=None) as cluster,
        Client(cluster) as started,
    ):
        yield started


@pytest.mark.slow  # a cluster with worker processes
def test_on_a_cluster_each_worker_runs_one_batch_and_the_answer_is_the_same(client: object) -> None:
    from distributed import get_task_stream

    y = seed()
    with dask.config.set(scheduler="sync"):
        reference = float(y.compute())
    settings = {"array_optimize": tuning.optimize_without_aliases, batching.LEAF_BATCHES_KEY: 2}
    with dask.config.set(settings), get_task_stream() as stream:
        assert float(y.compute()) == reference
    ran = {str(task["key"]): task["worker"] for task in stream.data}
    batches = {key: worker for key, worker in ran.items() if "gpu-magics-batch" in key}
    assert len(batches) == 2 and len(set(batches.values())) == 2, ran  # one batch on each worker
    kinds = Counter(key.strip("(',)").split("'")[0].rsplit("-", 1)[0] for key in ran)
    assert kinds["gpu-magics-batch"] == 2 and kinds["mean_combine-partial"] == 9, ran
    assert not [kind for kind in kinds if "mean_chunk" in kind] and len(ran) <= 13  # no task per chunk
