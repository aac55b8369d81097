"""A dask collection's task graph read as layers (or expression nodes) with task counts and bytes, from layer
metadata (``Blockwise`` sizes, collection annotations) or expression nodes' ``numblocks``/``npartitions``: a
100,000-task graph is read without building its tasks."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from gpu_magics.text.units import dropped

EXACT_LIMIT = 5_000  # graphs up to this many tasks get exact counts (building them is cheap)


@dataclass(frozen=True)
class LayerInfo:
    """One graph layer or expression node."""

    name: str
    op: str
    tasks: int
    nbytes: float | None
    chunk_type: str | None
    dependencies: tuple[str, ...]
    estimated: bool = False


def op_name(name: str) -> str:
    """The operation of a layer name: ``'mean_combine-partial-f9a5…'`` -> ``'mean_combine-partial'``."""
    from dask.utils import key_split

    return str(key_split(name))


def chunk_library(chunk_type: str | None) -> str:
    root = (chunk_type or "").split(".")[0]
    return {"numpy": "numpy", "cupy": "cupy", "cupyx": "cupy"}.get(root, "other")


def _nbytes(chunks: Any, dtype: Any) -> float | None:
    try:
        size = math.prod(float(sum(c)) for c in chunks) * int(dtype.itemsize)
    except (TypeError, ValueError, AttributeError, OverflowError):  # unknown or odd chunks, no itemsize
        return None
    return None if math.isnan(size) else size


def hlg_layer_tasks(layer: Any) -> tuple[int, bool]:
    """(tasks, estimated) of a HighLevelGraph layer without materializing it where avoidable."""
    from dask.blockwise import Blockwise

    if isinstance(layer, Blockwise) or not hasattr(layer, "is_materialized") or layer.is_materialized():
        return len(layer), False
    chunks = (getattr(layer, "collection_annotations", None) or {}).get("chunks")
    if chunks is not None:
        return math.prod(len(c) for c in chunks), True
    return len(layer), False


def hlg_counts(layers: dict[Any, Any]) -> dict[Any, tuple[int, bool]]:
    """(tasks, estimated) per layer; estimates are replaced by exact counts when the graph is small."""
    counts = {name: hlg_layer_tasks(layer) for name, layer in layers.items()}
    if sum(c for c, _ in counts.values()) <= EXACT_LIMIT:
        counts = {name: (len(layers[name]), False) if e else (c, e) for name, (c, e) in counts.items()}
    return counts


def hlg_layers(hlg: Any) -> list[LayerInfo]:
    """Layers of a HighLevelGraph (or one pseudo-layer for a plain dict graph)."""
    layers = getattr(hlg, "layers", None)
    if layers is None:
        return [LayerInfo("graph", "graph", len(hlg), None, None, ())]
    out = []
    counts = hlg_counts(layers)
    for name, layer in layers.items():
        tasks, estimated = counts[name]
        ann = getattr(layer, "collection_annotations", None) or {}
        chunks, dtype = ann.get("chunks"), ann.get("dtype")
        nbytes = _nbytes(chunks, dtype) if chunks is not None and dtype is not None else None
        deps = tuple(sorted(hlg.dependencies.get(name, ())))
        out.append(LayerInfo(str(name), op_name(str(name)), tasks, nbytes, ann.get("chunk_type"), deps, estimated))
    return _toposort(out)


_UNKNOWN = object()


Found = TypeVar("Found")


def worked_out(what: str, ask: Callable[[], Found], failed: Found) -> Found:
    """``ask()``, or ``failed`` where working it out fails (``what`` failed, once in the debug log): dask works out
    an expression's attributes and a graph's optimization on demand, which may fail any way on a graph."""
    try:
        return ask()
    except Exception as error:  # dask's own code on the user's graph may fail any way: the figure is unknown
        dropped(what, error, once=True)
        return failed


def _attribute(node: Any, attr: str) -> Any:
    """``node.<attr>``, or ``_UNKNOWN`` where working it out fails."""

    def read() -> Any:
        try:
            return getattr(node, attr)
        except AttributeError:  # a node without it (an array's numblocks on a frame)
            return _UNKNOWN

    return worked_out(f"working out an expression's {attr}", read, _UNKNOWN)


def _expr_tasks(node: Any) -> int:
    for attr in ("numblocks", "npartitions"):
        value = _attribute(node, attr)
        if value is _UNKNOWN:
            continue
        return math.prod(value) if isinstance(value, tuple) else int(value)
    return 1


def expr_layers(expr: Any) -> list[LayerInfo]:
    """Expression nodes as layers: output chunks per node approximate its tasks."""
    out = []
    for node in expr.walk():
        tasks = _expr_tasks(node)
        meta, chunks, dtype = (_attribute(node, attr) for attr in ("_meta", "chunks", "dtype"))
        chunk_type = None if meta is _UNKNOWN else f"{type(meta).__module__.split('.')[0]}.{type(meta).__name__}"
        nbytes = None if chunks is _UNKNOWN or dtype is _UNKNOWN else _nbytes(chunks, dtype)
        deps = tuple(str(d._name) for d in node.dependencies())
        name = str(node._name)
        out.append(LayerInfo(name, op_name(name), tasks, nbytes, chunk_type, deps, estimated=True))
    return _toposort(out)


def _toposort(layers: list[LayerInfo]) -> list[LayerInfo]:
    """Dependencies first; stable for ties."""
    by_name = {la.name: la for la in layers}
    done: set[str] = set()
    order: list[LayerInfo] = []
    for start in layers:
        stack: list[tuple[str, bool]] = [(start.name, False)]
        while stack:
            name, expanded = stack.pop()
            if name in done or name not in by_name:
                continue
            if expanded:
                done.add(name)
                order.append(by_name[name])
                continue
            stack.append((name, True))
            stack += [(d, False) for d in reversed(by_name[name].dependencies) if d not in done]
    return order


def expr_of(obj: Any) -> Any:
    """The expression behind an expression-based collection, or None (classic graphs, delayed objects)."""
    try:
        from dask._expr import Expr
    except ImportError:
        return None
    try:  # not getattr: a Delayed answers any attribute with a new Delayed
        expr = object.__getattribute__(obj, "expr")
    except AttributeError:
        return None
    return expr if isinstance(expr, Expr) else None


def is_collection(obj: Any) -> bool:
    """Whether ``obj`` is a dask collection (without importing dask if it is not loaded)."""
    import sys

    if "dask" not in sys.modules:
        return False
    from dask import is_dask_collection

    return bool(is_dask_collection(obj))
