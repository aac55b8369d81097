"""Graphs from a kernel without a GPU, run with CuPy chunks on the workers' GPUs.

The kernel builds its arrays with NumPy metadata (``array.backend = "numpy"``: nothing needs a GPU there), and
this optimization, which dask runs where it materializes the graph, makes each chunk on the worker's device:

- dask's random draws (``RandomState``, the module functions, ``default_rng``) draw with the device's generator;
- every other task that makes a chunk from nothing but data in the graph (``ones``, ``zeros``, ``full``,
  ``arange``, ``from_array`` and the like) is followed, in the same task, by a copy to the device;
- everything downstream then runs on device chunks: dask's chunk functions are NumPy's, which dispatch to CuPy.

Results go back to the kernel through ``device.to_host`` (``gpuless``), in NumPy.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpu_magics.gpurun.graphs import device, tuning


def optimize_for_remote_gpus(dsk: Any, keys: Any, **kwargs: Any) -> Any:
    """Chunks made on the workers' devices, then dask's own array optimization (and no alias tasks)."""
    from dask._task_spec import convert_legacy_graph
    from dask.array.optimization import optimize
    from dask.utils import ensure_dict

    graph = convert_legacy_graph(ensure_dict(dsk))
    return tuning.strip_aliases(optimize(on_device(graph), keys, **kwargs), keys)


def on_device(graph: Mapping[Any, Any]) -> dict[Any, Any]:
    """``graph`` with random draws on the device and every other chunk-making task followed by a device copy."""
    from dask._task_spec import Alias, DataNode, Task
    from dask.array.random import _apply_random, _apply_random_func

    rewritten: dict[Any, Any] = {}
    for key, node in graph.items():
        if isinstance(node, Task) and node.func is _apply_random:
            rewritten[key] = Task(key, device.draw_random_state, *node.args[1:], **node.kwargs)
        elif isinstance(node, Task) and node.func is _apply_random_func:
            rewritten[key] = Task(key, device.draw_generator, *node.args[1:], **node.kwargs)
        elif _makes_chunk(key, node, graph, Alias, DataNode):
            inner = DataNode(None, node.value) if isinstance(node, DataNode) else _inline(node)
            rewritten[key] = Task(key, device.to_device, inner)
        else:
            rewritten[key] = node
    return rewritten


def _inline(node: Any) -> Any:
    """The task as an argument of another (no key of its own)."""
    from dask._task_spec import Task

    return Task(None, node.func, *node.args, **node.kwargs)


def _makes_chunk(key: Any, node: Any, graph: Mapping[Any, Any], alias: type, data: type) -> bool:
    """Whether ``node`` makes an array chunk (a ``(name, i, ...)`` key) from data in the graph alone."""
    if not (isinstance(key, tuple) and len(key) > 1 and isinstance(key[0], str)) or isinstance(node, alias):
        return False
    if isinstance(node, data):
        return True
    return all(isinstance(graph.get(name), data) for name in node.dependencies)
