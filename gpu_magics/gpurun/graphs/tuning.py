"""Fewer tasks for the same work on a cluster: dask settings a ``multi-gpu`` cell runs under, where the user's
dask config leaves dask's defaults.

Each task on a distributed cluster costs about a millisecond of scheduling and messages, whatever it computes.
Two sources of tasks that compute nothing are cut:

- dask's linear fusion (``fuse_linear_task_spec``) renames each fused chain and leaves an ``Alias`` task under the
  old name for the tasks that read it: one task per chunk that only forwards its input (100 of the seed's 238).
  ``optimize_without_aliases`` runs dask's own array optimization, then points the readers at the fused task.
- reductions combine partial results ``split_every`` at a time (dask's default 4: a tree of many small tasks);
  ``REDUCTION_SPLIT_EVERY`` makes the tree shallower (the seed's 36 combine tasks become 9).

The optimization runs where dask materializes the graph (on the scheduler), so it is used only where the
scheduler can import this package (``task_count.scheduler_mark`` found the plugin there).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import dask

REDUCTION_SPLIT_EVERY = 16  # partial results combined at once (4 x 4 for a 2-D reduction)


def optimize_without_aliases(dsk: Any, keys: Any, **kwargs: Any) -> Any:
    """dask's array optimization, then without the alias tasks its linear fusion leaves behind."""
    from dask.array.optimization import optimize

    return strip_aliases(optimize(dsk, keys, **kwargs), keys)


def strip_aliases(graph: Any, keys: Any) -> Any:
    """``graph`` with every ``Alias`` task that is not a requested key removed, its readers reading its target."""
    if not isinstance(graph, Mapping):
        return graph  # fusion was off: dask kept the high-level graph, which has no such aliases
    from dask._task_spec import Alias
    from dask.core import flatten

    wanted = set(flatten(keys)) if isinstance(keys, list) else {keys}
    targets = {key: node.target for key, node in graph.items() if isinstance(node, Alias) and key not in wanted}
    if not targets:
        return graph

    def resolve(key: Any) -> Any:
        seen = 0
        while key in targets and seen <= len(targets):
            key, seen = targets[key], seen + 1
        return key

    stripped = {}
    for key, node in graph.items():
        if key in targets:
            continue
        aliased = node.dependencies & targets.keys()
        stripped[key] = node.substitute({name: resolve(name) for name in aliased}) if aliased else node
    return stripped


def cluster_graph_defaults() -> dict[str, Any]:
    """The settings above, each only where the user's dask config has not set it."""
    settings: dict[str, Any] = {}
    if dask.config.get("array_optimize", default=None) is None:
        settings["array_optimize"] = optimize_without_aliases
    if dask.config.get("split_every", default=None) is None:
        settings["split_every"] = REDUCTION_SPLIT_EVERY
    return settings
