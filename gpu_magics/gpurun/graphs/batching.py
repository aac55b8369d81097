"""One task per GPU worker for the chunks a reduction reads, instead of one task per chunk.

On a GPU cluster each task pays the scheduler's and the worker's fixed cost (messages, bookkeeping: 1-2 ms) while
its GPU work is a few milliseconds that the worker's thread only queues: with many GPUs the fixed cost is what is
left (the seed on 4 GPUs: GPU busy about half of the cell). Here the chunk tasks that feed a reduction (dask fuses
each chunk's chain, from the random draw to the chunk's partial result, into one task) are gathered into one task
per GPU worker, which queues its chunks' GPU work back to back from one thread and returns their partial results.
The reduction's tree above them is kept as dask made it, so the result is the same to the bit, and each chunk is
computed exactly as before (the same random numbers: the user's generator and seeds).

Only chunk tasks that read no other task and whose every reader is a step of dask's tree reduction (a layer named
``...-partial`` or ``...-aggregate``) are gathered: their results are small partials, so a reader on another worker
fetches little. Where the graph has no such chunks, or fewer than two a batch, it is left as it is.
"""

from __future__ import annotations

import operator
from collections.abc import Hashable, Mapping, Sequence
from typing import Any

LEAF_BATCHES_KEY = "gpu_magics.leaf-batches"  # dask config: how many batches (the GPU workers); unset or 0: none
MIN_LEAVES_PER_BATCH = 2
REDUCTION_STEPS = ("-partial", "-aggregate")  # dask's names for the layers of its tree reduction (_tree_reduce)


def batch_reduction_leaves(graph: Any, keys: Any, batches: int) -> Any:
    """``graph`` (a low-level graph of dask's task spec) with the chunk tasks that feed its tree reductions
    gathered into ``batches`` tasks of nearly equal size, their readers reading each chunk's result from its
    batch; ``graph`` itself where nothing is gathered."""
    if batches < 1 or not isinstance(graph, Mapping):
        return graph
    from dask._task_spec import Task, TaskRef
    from dask.base import tokenize
    from dask.core import flatten

    wanted = set(flatten(keys)) if isinstance(keys, list) else {keys}
    readers: dict[Hashable, list[Hashable]] = {}
    for key, node in graph.items():
        for dependency in node.dependencies:
            readers.setdefault(dependency, []).append(key)
    leaves = [
        key
        for key, node in graph.items()
        if isinstance(node, Task)
        and not node.dependencies
        and key not in wanted
        and readers.get(key)
        and all(_reduction_step(reader) for reader in readers[key])
    ]
    if len(leaves) < batches * MIN_LEAVES_PER_BATCH:
        return graph
    leaves.sort(key=lambda leaf: (_order(readers[leaf][0]), _order(leaf)))  # siblings of one reader stay together
    name = f"gpu-magics-batch-{tokenize(*leaves)}"
    batched = dict(graph)
    found_in: dict[Hashable, Any] = {}  # a chunk's key -> what reads its result from its batch
    for index, part in enumerate(_parts(leaves, batches)):
        batch_key = (name, index)
        batched[batch_key] = Task(batch_key, gathered, *(graph[leaf] for leaf in part))
        for position, leaf in enumerate(part):
            del batched[leaf]
            found_in[leaf] = Task(None, operator.getitem, TaskRef(batch_key), position)
    for reader in {reader for leaf in leaves for reader in readers[leaf]}:
        node = graph[reader]
        batched[reader] = node.substitute({key: found_in[key] for key in node.dependencies if key in found_in})
    return batched


def gathered(*results: Any) -> tuple[Any, ...]:
    """A batch's result: its chunks' results, in its order."""
    return results


def _reduction_step(key: Hashable) -> bool:
    """Whether ``key`` is a task of one of dask's tree-reduction layers (``mean_combine-partial-<token>``)."""
    name = key[0] if isinstance(key, tuple) and key else key
    return isinstance(name, str) and name.rsplit("-", 1)[0].endswith(REDUCTION_STEPS)


def _order(key: Hashable) -> tuple[str, tuple[int, ...]]:
    """A sort key that orders a layer's chunks by their indices (``('x', 10)`` after ``('x', 2)``)."""
    if isinstance(key, tuple) and key and all(isinstance(part, int) for part in key[1:]):
        return str(key[0]), tuple(key[1:])
    return str(key), ()


def _parts(items: Sequence[Any], count: int) -> list[Sequence[Any]]:
    """``items`` cut into ``count`` contiguous parts whose sizes differ by one at most."""
    size, extra = divmod(len(items), count)
    parts, start = [], 0
    for index in range(count):
        end = start + size + (1 if index < extra else 0)
        parts.append(items[start:end])
        start = end
    return parts
