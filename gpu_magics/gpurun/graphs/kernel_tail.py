"""A reduction's aggregate computed in the kernel: one trip between the workers fewer per cell.

After ``grouping`` and ``folding``, a whole-array reduction is one run per GPU and an aggregate that reads one
small partial result per run. On the cluster, the aggregate waits for the scheduler to place it on a worker, that
worker fetches the other runs' partial results, and the client then fetches the aggregate's result from it: two
hops between processes after the last run ends (8-10 ms on 4 GPUs, where each run computes for about 110 ms). The
client gathering the runs' partial results directly and aggregating them itself is one hop.

While a ``multi-gpu`` cell runs, ``client.get`` (what ``.compute()`` calls) materializes and optimizes a small
graph with a reduction in the kernel (dask's own optimization with this package's, the same that would run on the
scheduler); where every requested key is such an aggregate, the runs go to the cluster and the aggregates run here
on the partial results, on the device the result would have come to anyway. Any other such graph goes to the
cluster already materialized. Graphs that carry per-layer annotations, large ones (whose compact high-level form
is what the scheduler should get) and graphs without a reduction are never touched. The aggregate computes the
same function on the same partial results: the same value to the bit. Where every task a cell ran had its result
gathered here, the cell does not wait for the workers' GPUs at its end (``results_gathered``): each worker's GPU
work was done when it sent its result. Dask config ``gpu-magics.aggregate-in-kernel`` (default true) turns it off.
"""

from __future__ import annotations

import contextlib
import types
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from distributed import Client

_gathered = 0  # tasks whose results this process gathered through ``aggregates_here``: their GPU work was done

MAX_TASKS = 5_000  # larger graphs go to the scheduler in their compact high-level form, materialized there
AGGREGATE = "-aggregate"  # dask.array's reductions name their last step's layer so


def enabled() -> bool:
    """``gpu-magics.aggregate-in-kernel`` from the dask config (default ``True``)."""
    from gpu_magics.arrays.dask_settings import config_switch

    return config_switch(
        "gpu-magics.aggregate-in-kernel",
        on="a reduction's aggregate runs in the kernel, the default",
        off="on a worker",
    )


def gathered() -> int:
    """How many tasks' results this process has gathered through ``aggregates_here`` so far."""
    return _gathered


def results_gathered(settled: int | None, since: int) -> bool:
    """Whether this process gathered the result of every task a cell ran: ``settled`` tasks finished while the
    cell ran and none still waits or runs (``Recorded.settled``), as many as were gathered here since
    ``gathered()`` was ``since``. A worker copies a CuPy result to host memory to send it, which waits for all
    the GPU work queued before it there: the cell has nothing left to wait for on the workers' GPUs."""
    return bool(settled) and settled == _gathered - since


def split_tail(graph: Mapping[Any, Any], keys: list[Any]) -> tuple[dict[Any, Any], list[Any]] | None:
    """(the graph without ``keys``' tasks, the runs those tasks read) where every requested key is a task that
    reads only runs of a reduction's leaves (``folding.fold_run``, or ``grouping.together`` where the reduction's
    aggregate reads its chunks' partial results itself) and nothing else reads; ``None`` otherwise."""
    from gpu_magics.gpurun.graphs.folding import fold_run
    from gpu_magics.gpurun.graphs.grouping import together

    run_functions = (fold_run, together)

    wanted = set(keys)
    if not wanted or not wanted <= graph.keys():
        return None
    runs: set[Any] = set()
    for key in wanted:
        needs = graph[key].dependencies
        if not needs or any(getattr(graph.get(need), "func", None) not in run_functions for need in needs):
            return None
        runs |= needs
    if any(node.dependencies & wanted for key, node in graph.items() if key not in wanted):
        return None
    rest = {key: node for key, node in graph.items() if key not in wanted}
    return rest, sorted(runs, key=str)


def worth_materializing(expr: Any) -> bool:
    """Whether ``expr`` (what ``dask.compute`` hands the scheduler function) is one small high-level graph with a
    reduction's aggregate and no per-layer annotations: the graphs ``split_tail`` may apply to."""
    from dask._expr import HLGExpr, _HLGExprSequence

    members = expr.operands if isinstance(expr, _HLGExprSequence) else [expr]
    if not members or not all(isinstance(member, HLGExpr) for member in members):
        return False
    reduction, tasks = False, 0
    for name, layer in (item for member in members for item in member.hlg.layers.items()):
        tasks += len(layer)
        if layer.annotations or tasks > MAX_TASKS:
            return False
        reduction = reduction or AGGREGATE in str(name)
    return reduction


@contextlib.contextmanager
def aggregates_here(client: Client) -> Iterator[None]:
    """While the block runs, ``client.get`` computes a folded reduction's aggregate in this process (see above);
    whatever ``client.get`` was before (the plain method, or another wrapper) does the rest."""
    previous = client.get

    def get(self: Client, dsk: Any, keys: Any, sync: bool = True, **kwargs: Any) -> Any:
        if not sync or kwargs.get("actors") or not worth_materializing(dsk):
            return previous(dsk, keys, sync=sync, **kwargs)
        from dask.core import flatten
        from distributed.utils_comm import pack_data

        graph = dict(dsk.__dask_graph__())  # dask's optimization and this package's, as on the scheduler
        wanted = list(flatten(keys)) if isinstance(keys, list) else [keys]
        split = split_tail(graph, wanted)
        if split is None:
            return previous(_high_level(graph), keys, sync=sync, **kwargs)
        rest, runs = split
        partials = previous(_high_level(rest), runs, sync=True, **kwargs)
        global _gathered
        _gathered += len(runs)
        values = dict(zip(runs, partials, strict=True))
        return pack_data(keys, {key: graph[key](values) for key in wanted})

    had_own = "get" in vars(client)
    client.get = types.MethodType(get, client)  # type: ignore[method-assign]
    try:
        yield
    finally:
        if had_own:
            client.get = previous  # type: ignore[method-assign]
        else:
            with contextlib.suppress(AttributeError):
                del client.get


def _high_level(graph: dict[Any, Any]) -> Any:
    """``graph`` as one materialized layer: what ``client.get`` sends without tokenizing every task (it names a
    plain dict by a hash of its whole content)."""
    from dask.highlevelgraph import HighLevelGraph, MaterializedLayer

    name = f"gpu-magics-materialized-{id(graph):x}"
    return HighLevelGraph({name: MaterializedLayer(graph)}, {name: set()})
