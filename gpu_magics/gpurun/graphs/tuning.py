"""Fewer tasks for the same work on a cluster: dask settings a ``multi-gpu`` cell runs under, where the user's
dask config leaves dask's defaults.

Each task on a distributed cluster costs about a millisecond of scheduling and messages, whatever it computes.
Two sources of tasks that compute nothing are cut, and one wait on the GPU is avoided:

- dask's linear fusion (``fuse_linear_task_spec``) renames each fused chain and leaves an ``Alias`` task under the
  old name for the tasks that read it: one task per chunk that only forwards its input (100 of the seed's 238).
  ``optimize_without_aliases`` runs dask's own array optimization, then points the readers at the fused task.
- reductions combine partial results ``split_every`` at a time (dask's default 4: a tree of many small tasks);
  ``REDUCTION_SPLIT_EVERY`` makes the tree shallower (the seed's 36 combine tasks become 9).
- a reduction over many chunks runs its leaves in one task per GPU (``grouping.group_reduction_leaves``: the
  seed's 100 chunk tasks become 4 on 4 GPUs; the same reduction tree), and a whole-array reduction's runs combine
  their own chunks, its aggregate reading one partial result per run (``folding``: 15 tasks become 5);
- dask draws each random chunk from a new ``cupy.random.RandomState``, whose cuRAND state is freed when the chunk
  is done, waiting for the whole GPU; ``reseed_generators`` draws the same numbers from a generator each worker
  thread keeps and reseeds (``device.draw_reseeding``), with the seed CuPy would derive from the chunk's state
  worked out once here (``cupy_seed``), so the task messages carry 8 bytes a chunk instead of 2.5 KB.

The optimization runs where dask materializes the graph (on the scheduler, or in the kernel for a small reduction
whose aggregate ``kernel_tail`` computes there), so it is used only where the scheduler can import this package
(``task_count.scheduler_mark`` found the plugin there).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

import dask

REDUCTION_SPLIT_EVERY = 16  # partial results combined at once (4 x 4 for a 2-D reduction)


def optimize_without_aliases(
    dsk: Any, keys: Any, *, slots: int = 0, per_slot: int = 0, fold: bool = False, **kwargs: Any
) -> Any:
    """dask's array optimization of the graph with reseeded generators (``reseed_generators``), then without
    the alias tasks its linear fusion leaves behind; on a cluster of ``slots`` GPUs (or CPU worker threads), a
    reduction's leaves ``per_slot`` runs to each (``grouping``), folded into them with ``fold`` (``folding``)."""
    from dask.array.optimization import optimize

    from gpu_magics.gpurun.graphs.grouping import group_reduction_leaves

    optimized = strip_aliases(optimize(reseed_generators(dsk), keys, **kwargs), keys)
    return group_reduction_leaves(optimized, keys, slots, per_slot, fold=fold) if slots and per_slot else optimized


def reseed_generators(dsk: Any) -> Any:
    """The graph with each chunk drawn from CuPy's default ``RandomState`` drawn instead by ``draw_reseeding``
    (the same numbers, one generator per worker thread). Only dask's random layers change; the rest of the
    high-level graph stays as it is, so dask's blockwise fusion still applies."""
    from dask.array.random import _apply_random
    from dask.highlevelgraph import HighLevelGraph, MaterializedLayer

    from gpu_magics.gpurun.graphs import device

    if not isinstance(dsk, HighLevelGraph):
        return dsk
    layers = dict(dsk.layers)
    changed = False
    for name, layer in dsk.layers.items():
        if not isinstance(layer, MaterializedLayer):
            continue
        mapping = layer.mapping
        draws = {key: node for key, node in mapping.items() if _cupy_random_state_task(node, _apply_random)}
        if not draws:
            continue
        from dask._task_spec import Task

        rewritten = dict(mapping)
        for key, node in draws.items():
            funcname, state_data, *rest = node.args[1:]
            seed = cupy_seed(state_data)
            rewritten[key] = Task(key, device.draw_reseeding, funcname, seed, *rest, **node.kwargs)
        layers[name] = MaterializedLayer(rewritten, annotations=layer.annotations)
        changed = True
    return HighLevelGraph(layers, dsk.dependencies) if changed else dsk


def cupy_seed(state_data: Any) -> Any:
    """The seed ``cupy.random.RandomState(state_data)`` derives from dask's per-chunk state (624 words: 2.5 KB a
    chunk in every task message, 62 KB in a run of 25), as CuPy's ``RandomState.seed`` derives it: the first 16 hex
    digits of the words' MD5, as a ``uint64`` (which ``seed`` takes as it is). Anything else stays as it is."""
    import hashlib

    import numpy as np

    if not isinstance(state_data, np.ndarray):
        return state_data
    return np.uint64(int(hashlib.md5(state_data.data).hexdigest()[:16], 16))


def _cupy_random_state_task(node: Any, apply_random: Any) -> bool:
    """Whether ``node`` draws a chunk with ``cupy.random.RandomState`` itself (not a partial, not another
    generator method the user chose)."""
    if getattr(node, "func", None) is not apply_random or not node.args:
        return False
    generator = node.args[0]
    return (
        getattr(generator, "__module__", "").startswith("cupy") and getattr(generator, "__name__", "") == "RandomState"
    )


def strip_aliases(graph: Any, keys: Any) -> Any:
    """``graph`` with every ``Alias`` task that is not a requested key removed, its readers reading its target; a
    requested key that is an alias of a task only it reads (the result's finalize, fused with the step before it
    under another name) becomes that task, one task and one round through the scheduler fewer."""
    if not isinstance(graph, Mapping):
        return graph  # fusion was off: dask kept the high-level graph, which has no such aliases
    from dask._task_spec import Alias
    from dask.core import flatten

    wanted = set(flatten(keys)) if isinstance(keys, list) else {keys}
    targets = {key: node.target for key, node in graph.items() if isinstance(node, Alias) and key not in wanted}
    readers: dict[Any, int] = {}
    for node in graph.values():
        for name in node.dependencies:
            readers[name] = readers.get(name, 0) + 1
    renamed = {  # target -> the requested key that takes its task
        node.target: key
        for key in wanted
        if isinstance(node := graph.get(key), Alias)
        and node.target in graph
        and node.target not in wanted
        and readers.get(node.target) == 1
        and not isinstance(graph[node.target], Alias)
    }
    if not targets and not renamed:
        return graph

    def resolve(key: Any) -> Any:
        seen = 0
        while key in targets and seen <= len(targets):
            key, seen = targets[key], seen + 1
        return key

    stripped = {}
    for key, node in graph.items():
        if key in targets or key in renamed:
            continue
        if key in wanted and isinstance(node, Alias) and node.target in renamed:
            node = graph[node.target]
        aliased = node.dependencies & targets.keys()
        substituted = node.substitute({name: resolve(name) for name in aliased}) if aliased else node
        stripped[key] = substituted if substituted.key == key else substituted.substitute({}, key=key)
    return stripped


def gpu_graph_defaults() -> dict[str, Any]:
    """For one GPU under dask's threads: the reseeded generators (and no alias tasks), unless the user's dask
    config names its own ``array_optimize``."""
    if dask.config.get("array_optimize", default=None) is None:
        return {"array_optimize": optimize_without_aliases}
    return {}


def cluster_graph_defaults(slots: int = 0) -> dict[str, Any]:
    """The settings above for a cluster of ``slots`` GPUs (or CPU worker threads), each only where the user's dask
    config has not set it; ``gpu-magics.runs-per-slot`` (default 1; 0: off) sets how many runs of a reduction's
    leaves each slot gets, ``gpu-magics.fold-reductions`` (default True) whether a whole-array reduction's runs
    combine their own chunks."""
    from gpu_magics.gpurun.graphs.grouping import fold_reductions, runs_per_slot

    settings: dict[str, Any] = {}
    if dask.config.get("array_optimize", default=None) is None:
        per_slot, fold = runs_per_slot(), fold_reductions()
        settings["array_optimize"] = functools.partial(
            optimize_without_aliases, slots=slots, per_slot=per_slot, fold=fold
        )
    if dask.config.get("split_every", default=None) is None:
        settings["split_every"] = REDUCTION_SPLIT_EVERY
    return settings


def folds(config: Mapping[str, Any]) -> bool:
    """Whether the plan ``config`` optimizes graphs with this package's folding of whole-array reductions (set by
    ``cluster_graph_defaults`` with ``gpu-magics.fold-reductions`` on)."""
    optimize = config.get("array_optimize")
    return (
        isinstance(optimize, functools.partial)
        and optimize.func is optimize_without_aliases
        and bool(optimize.keywords.get("fold"))
        and bool(optimize.keywords.get("slots"))
        and bool(optimize.keywords.get("per_slot"))
    )
