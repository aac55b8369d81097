"""A reduction's leaves in one task per GPU: the same chunks, the same reduction tree, far fewer tasks.

Each task on a distributed cluster costs one to two milliseconds between the kernel, the scheduler and the
workers whatever it computes, so a reduction over many small chunks pays most of its time in tasks (the seed in
2500^2 chunks: 1,711 tasks, 3.70 s on one H100 against 1.89 s grouped; at 10000^2 chunks the tasks are long
enough and grouping gains nothing). Where a reduction's leaves (tasks that read nothing from the graph and feed
only the reduction's ``-partial`` or ``-aggregate`` steps, whose inputs are small by design) are many, they run
in ``RUNS_PER_SLOT`` task per GPU (per thread on CPU workers), each computing a contiguous run of leaves in turn
and returning their results together (on a GPU its kernels queue back to back, with no wait between chunks);
each reduction step reads its inputs from those runs. The reduction combines the same values in the same order,
and each chunk is drawn with the same generator and seed as before, so the result is the same. Leaves that feed
anything else (a rechunk, an overlap, a result the kernel asks for) keep a task each, as a consumer on another
worker would otherwise fetch a whole run for one chunk. A run stops between its chunks once its task is released
(an interrupted cell, ``run_stop``).
"""

from __future__ import annotations

import operator
from collections import defaultdict
from collections.abc import Mapping
from typing import Any

RUNS_PER_SLOT = 1  # runs per GPU (per worker thread on CPU workers); dask config ``gpu-magics.runs-per-slot``
MIN_LEAVES_PER_RUN = 2  # fewer leaves than this per run: the graph stays as it is
REDUCTION_STEPS = ("-partial", "-aggregate")  # dask.array's reduction steps name their layers so


def together(*values: Any) -> tuple[Any, ...]:
    """A run's task: its leaves' results, computed one after the other (their arguments), as one tuple."""
    return values


def runs_per_slot() -> int:
    """``gpu-magics.runs-per-slot`` from the dask config (default ``RUNS_PER_SLOT``; 0 turns grouping off)."""
    import dask

    from gpu_magics.text.errors import SettingError

    said = dask.config.get("gpu-magics.runs-per-slot", default=RUNS_PER_SLOT)
    if isinstance(said, bool) or not isinstance(said, int) or said < 0:
        raise SettingError(
            f"dask config gpu-magics.runs-per-slot is {said!r}: set a whole number of runs per GPU, 1 by default "
            "(0 turns the grouping of a reduction's chunk tasks off)"
        )
    return said


def runs_for(leaves: int, slots: int, per_slot: int = RUNS_PER_SLOT) -> int:
    """How many runs ``leaves`` leaves make on ``slots`` GPUs (or CPU worker threads), ``per_slot`` each at most
    (0: leave the graph as it is)."""
    if slots < 1 or per_slot < 1:
        return 0
    runs = min(per_slot * slots, leaves // MIN_LEAVES_PER_RUN)
    return runs if runs >= slots else 0


def fold_reductions() -> bool:
    """``gpu-magics.fold-reductions`` from the dask config (default ``True``: a whole-array reduction's runs
    combine their own chunks, ``folding``)."""
    from gpu_magics.arrays.dask_settings import config_switch

    return config_switch(
        "gpu-magics.fold-reductions",
        on="a whole-array reduction's runs combine their own chunks, the default",
        off="dask's reduction tree",
    )


def group_reduction_leaves(
    graph: Any, keys: Any, slots: int, per_slot: int = RUNS_PER_SLOT, *, fold: bool = False
) -> Any:
    """``graph`` with its reduction leaves run ``runs_for`` at a time (see above); unchanged where there are
    too few of them for ``slots`` GPUs (or CPU worker threads). With ``fold``, a whole-array reduction's runs
    combine their own chunks and its aggregate reads the runs (``folding``)."""
    from dask._task_spec import GraphNode, Task, TaskRef
    from dask.core import flatten

    from gpu_magics.gpurun.graphs import run_stop

    if not isinstance(graph, Mapping) or not all(isinstance(node, GraphNode) for node in graph.values()):
        return graph  # a graph dask did not optimize into tasks (its fusion off): as it is

    wanted = set(flatten(keys)) if isinstance(keys, list) else {keys}
    readers: dict[Any, list[Any]] = defaultdict(list)
    for key, node in graph.items():
        for name in node.dependencies:
            readers[name].append(key)
    leaves = [
        key
        for key, node in graph.items()
        if isinstance(node, Task)
        and not node.dependencies
        and key not in wanted
        and readers[key]
        and all(_reduction_step(reader, graph[reader]) for reader in readers[key])
    ]
    runs = runs_for(len(leaves), slots, per_slot)
    if not runs:
        return graph
    leaves.sort(key=lambda key: (sorted(map(str, readers[key])), str(key)))  # a step's leaves side by side
    # A run's name says what it holds (how many runs share the leaves, folded or not): a key names one value, and
    # a cell run again with other settings must not find the last cell's runs under the same key.
    name = f"{_name(leaves[0])}-{runs}-runs"
    if fold:
        from gpu_magics.gpurun.graphs.folding import fold as fold_runs

        folded = fold_runs(graph, leaves, readers, runs, f"{_name(leaves[0])}-{runs}-folded-runs")
        if folded is not None:
            return folded
    grouped: dict[Any, Any] = {}
    where: dict[Any, Any] = {}
    for index in range(runs):
        members = leaves[index * len(leaves) // runs : (index + 1) * len(leaves) // runs]
        run_key = (name, index)
        # each chunk stops the run once its task is released (an interrupted cell): run_stop
        grouped[run_key] = Task(run_key, together, *(run_stop.chunk_task(graph[key]) for key in members))
        for position, key in enumerate(members):
            where[key] = Task(None, operator.getitem, TaskRef(run_key), position)
    for key, node in graph.items():
        if key in where:
            continue
        reads = node.dependencies & where.keys()
        grouped[key] = node.substitute({name: where[name] for name in reads}) if reads else node
    return grouped


def _reduction_step(key: Any, node: Any) -> bool:
    """Whether the task ``key`` is a reduction step, or dask fused one into it (the last step with the result's
    finalize, which then has the result's name)."""
    from gpu_magics.gpurun.graphs.folding import fused_tasks

    return any(step in _name(name) for name in (key, *fused_tasks(node)) for step in REDUCTION_STEPS)


def _name(key: Any) -> str:
    return str(key[0] if isinstance(key, tuple) else key)
