"""A whole-array reduction folded into its runs: each run combines its own chunks, the aggregate reads the runs.

``grouping`` runs a reduction's leaves in one task per GPU but keeps dask's reduction tree, whose combining steps
each read chunks of several runs: on 4 H100s the seed's runs ended at 128-145 ms and its result came at 203 ms, the
combining steps waiting for partial results to move between workers in two waves. Where the reduction is over
every axis to one value (``sum``, ``mean``, ``min``, ``var``... of the whole array), any set of chunks may be
combined in any arrangement, so each run applies the reduction's own combining function to its chunks as they
come, and the aggregate reads one partial result per run: one wave of small transfers, then the result. The value
is the same reduction over the same numbers, summed in another order (equal to 1e-12 relative, not to the bit).

Only dask's own associative combining functions are folded (``FOLDABLE``); a reduction along some axes, one whose
aggregate dask fused with what follows it (``std``), and any other combining function keep dask's tree.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import toolz

# dask.array's combining functions that combine any set of partial results in any arrangement to the same value
FOLDABLE = frozenset(
    {"sum", "prod", "min", "max", "any", "all", "nansum", "nanprod", "chunk_min", "chunk_max"}
    | {"nanmin", "nanmax", "mean_combine", "moment_combine"}
)
AGGREGATING = FOLDABLE | {"mean_agg", "moment_agg"}  # and the aggregates of those that combine otherwise
PARTIAL, AGGREGATE = "-partial", "-aggregate"


def fold_run(combine: Callable[[Any], Any], depth: int, *values: Any) -> Any:
    """A folded run's task: its chunks' partial results (its arguments, computed one after the other), combined
    as one block nested ``depth`` deep (one level per reduced axis), as dask's combining steps read them."""
    nested: Any = list(values)
    for _ in range(depth - 1):
        nested = [nested]
    return combine(nested)


def fold(
    graph: Mapping[Any, Any], leaves: Sequence[Any], readers: Mapping[Any, Sequence[Any]], runs: int, name: str
) -> dict[Any, Any] | None:
    """``graph`` with ``leaves`` (in order) in ``runs`` folded runs named ``name``, each combining its own chunks,
    and the aggregate reading the runs; ``None`` where the reduction cannot be folded (see above)."""
    from dask._task_spec import Alias, Task, parse_input

    from gpu_magics.gpurun.graphs import run_stop

    shape = _foldable(graph, leaves, readers)
    if shape is None:
        return None
    combine, depth, aggregate, steps = shape
    folded: dict[Any, Any] = {}
    refs = []
    for index in range(runs):
        members = leaves[index * len(leaves) // runs : (index + 1) * len(leaves) // runs]
        run_key = (name, index)
        inlined = (run_stop.chunk_task(graph[key]) for key in members)  # each stops the run once released
        folded[run_key] = Task(run_key, fold_run, combine, depth, *inlined)
        refs.append(Alias(run_key))  # a reference inside a list (a TaskRef there is not read as one)
    nested: Any = refs
    for _ in range(depth - 1):
        nested = [nested]
    inner_key, inner = _aggregate_within(graph[aggregate], aggregate)
    reading_runs = Task(inner_key, inner.func, parse_input(nested), **inner.kwargs)
    gone = set(leaves) | set(steps)
    for key, other in graph.items():
        if key == aggregate:
            folded[key] = reading_runs if inner_key == key else _fused_again(other, reading_runs)
        elif key not in gone:
            folded[key] = other
    return folded


def _aggregate_within(node: Any, key: Any) -> tuple[Any, Any]:
    """The aggregate step itself (key and task) in the task ``key``: the task, or the one aggregate among the tasks
    dask fused into it (what follows the aggregate: the result's finalize, ``std``'s square root)."""
    fused = fused_tasks(node)
    inside = [inner for inner in fused if AGGREGATE in _name(inner)]
    return (inside[0], fused[inside[0]]) if len(inside) == 1 else (key, node)


def _fused_again(node: Any, aggregate: Any) -> Any:
    """The fused task ``node`` made again with ``aggregate`` in place of its own aggregate step."""
    from dask._task_spec import GraphNode

    tasks = [aggregate if inner == aggregate.key else task for inner, task in fused_tasks(node).items()]
    return GraphNode.fuse(*tasks, key=node.key)


def _foldable(
    graph: Mapping[Any, Any], leaves: Sequence[Any], readers: Mapping[Any, Sequence[Any]]
) -> tuple[Any, int, Any, list[Any]] | None:
    """(the combining function, how many axes it reduces, the aggregate's key, the combining steps) where the
    reduction over ``leaves`` can be folded, else ``None``."""
    from dask._task_spec import Task

    steps = [key for key in graph if PARTIAL in _name(key)]
    aggregates = [key for key, node in graph.items() if AGGREGATE in _name(_aggregate_within(node, key)[0])]
    if not steps or len(aggregates) != 1 or not all(isinstance(graph[key], Task) for key in (*steps, *aggregates)):
        return None
    ndim = len(leaves[0]) - 1 if isinstance(leaves[0], tuple) else 0
    axes = tuple(range(ndim))
    functions = [func for key in steps for func in _step_functions(graph[key])]
    combine = functions[0]
    _, aggregate = _aggregate_within(graph[aggregates[0]], aggregates[0])
    if ndim == 0 or _reduced(combine) != (axes, True) or _reduced(aggregate.func)[0] != axes:
        return None
    if any(not _same(func, combine) for func in functions) or len(aggregate.args) != 1:
        return None  # more than one reduction, or a step that is not the same combining function
    within = set(leaves) | set(steps)
    if not all(graph[key].dependencies <= within for key in steps) or not graph[aggregates[0]].dependencies <= set(
        steps
    ):
        return None
    if not all(PARTIAL in _name(reader) for key in leaves for reader in readers[key]):
        return None  # a chunk the aggregate reads itself: dask made no combining step for it
    return combine, ndim, aggregates[0], steps


def fused_tasks(node: Any) -> dict[Any, Any]:
    """The tasks dask's linear fusion put into ``node`` (key -> task), or ``{}`` where it is not a fused task."""
    from dask._task_spec import _execute_subgraph

    if getattr(node, "func", None) is _execute_subgraph and node.args and isinstance(node.args[0], dict):
        return node.args[0]
    return {}


def _step_functions(node: Any) -> list[Any]:
    """The functions a combining step applies: its own, or those of the steps dask fused into it (a step with
    one input is fused with the step it reads)."""
    inside = fused_tasks(node)
    return [getattr(inner, "func", None) for inner in inside.values()] if inside else [node.func]


def _reduced(func: Any) -> tuple[tuple[int, ...] | None, bool]:
    """The axes a (dask-made) reduction step reduces and whether it keeps them; ``(None, False)`` where it is not
    one of the foldable functions."""
    if isinstance(func, toolz.functoolz.Compose):
        func = func.funcs[-1] if func.funcs else func.first  # the last applied: the reduction after the concatenation
    if not isinstance(func, functools.partial) or getattr(func.func, "__name__", None) not in AGGREGATING:
        return None, False
    axis = func.keywords.get("axis")
    return (tuple(axis) if isinstance(axis, tuple | list) else None), bool(func.keywords.get("keepdims"))


def _same(func: Any, other: Any) -> bool:
    """Whether two steps apply the same function with the same arguments (dask gives every level one object; a
    graph that went through pickle may hold copies)."""
    return func is other or repr(func) == repr(other)


def _name(key: Any) -> str:
    return str(key[0] if isinstance(key, tuple) else key)
