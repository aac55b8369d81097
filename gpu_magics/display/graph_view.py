"""Task-graph summaries: layers (or expression nodes) with task counts, bytes and a layered DAG in SVG.

Counts come from layer metadata (``Blockwise`` sizes, collection annotations) or from expression nodes'
``numblocks``/``npartitions``, so a 100,000-task graph is summarized without building its tasks. Graphs of more
than ``MAX_NODES`` layers are aggregated (chains, then operation per level, then level bands) before drawing.
"""

from __future__ import annotations

import dataclasses
import math
from collections import Counter
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Any

from gpu_magics.display import svg
from gpu_magics.display.format import DASH, STYLE, format_bytes
from gpu_magics.text.units import dropped

MAX_NODES = 60
DETAILED = 8  # graphs of up to this many layers show every layer; larger ones collapse plain chains
MIN_CHAIN = 3  # the shortest chain of different operations drawn as one box
EXACT_LIMIT = 5_000  # graphs up to this many tasks get the exact optimized count (full optimization is cheap)


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


@dataclass(frozen=True)
class Group:
    """One drawn box / table row: a layer, or several aggregated layers."""

    label: str
    ops: tuple[str, ...]
    members: tuple[str, ...]
    tasks: int
    nbytes: float | None
    chunk_library: str
    dependencies: tuple[int, ...]


def op_name(name: str) -> str:
    """The operation of a layer name: ``'mean_combine-partial-f9a5…'`` -> ``'mean_combine-partial'``."""
    from dask.utils import key_split

    return str(key_split(name))


def _chunk_library(chunk_type: str | None) -> str:
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


def _worked_out(node: Any, attr: str) -> Any:
    """``node.<attr>``, or ``_UNKNOWN`` where working it out fails."""
    try:
        return getattr(node, attr)
    except AttributeError:  # a node without it (an array's numblocks on a frame)
        return _UNKNOWN
    except Exception as error:  # an expression works this out on demand, which may fail any way: unknown
        dropped(f"working out an expression's {attr}", error, once=True)
        return _UNKNOWN


def _expr_tasks(node: Any) -> int:
    for attr in ("numblocks", "npartitions"):
        value = _worked_out(node, attr)
        if value is _UNKNOWN:
            continue
        return math.prod(value) if isinstance(value, tuple) else int(value)
    return 1


def expr_layers(expr: Any) -> list[LayerInfo]:
    """Expression nodes as layers: output chunks per node approximate its tasks."""
    out = []
    for node in expr.walk():
        tasks = _expr_tasks(node)
        meta, chunks, dtype = (_worked_out(node, attr) for attr in ("_meta", "chunks", "dtype"))
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


def _levels(layers: Sequence[LayerInfo]) -> list[int]:
    index = {la.name: i for i, la in enumerate(layers)}
    level = [0] * len(layers)
    for i, la in enumerate(layers):  # topological order: dependencies already have their level
        level[i] = max((level[index[d]] + 1 for d in la.dependencies if d in index), default=0)
    return level


def _chains(layers: Sequence[LayerInfo], index: dict[str, int], any_op: bool) -> list[int]:
    """Each layer's chain root: a layer with one dependency that nothing else depends on joins its chain
    (``any_op``: whatever the operations; else only the same operation)."""
    dependents: dict[str, int] = {}
    for la in layers:
        for d in la.dependencies:
            dependents[d] = dependents.get(d, 0) + 1
    root = list(range(len(layers)))
    for i, la in enumerate(layers):
        deps = [d for d in la.dependencies if d in index]
        if len(deps) == 1 and dependents[deps[0]] == 1 and (any_op or layers[index[deps[0]]].op == la.op):
            root[i] = root[index[deps[0]]]
    return root


def group_layers(layers: Sequence[LayerInfo], limit: int = MAX_NODES) -> list[Group]:
    """Aggregate ``layers`` (topologically sorted) into at most ``limit`` groups that still form a DAG.

    Graphs of more than ``DETAILED`` layers first collapse their plain chains (layers one after another with
    nothing branching off) of one operation, and above twice that, of any; small graphs show every layer.
    """
    index = {la.name: i for i, la in enumerate(layers)}
    keys: list[Hashable] = list(range(len(layers)))
    if len(layers) > DETAILED:  # 1. plain chains of one operation, then of any
        keys = list(_chains(layers, index, any_op=False))
        sizes = Counter(keys)
        if len(sizes) > 2 * DETAILED:
            mixed = _chains(layers, index, any_op=True)
            mixed_sizes = Counter(mixed)
            keys = [m if mixed_sizes[m] >= MIN_CHAIN else k for k, m in zip(keys, mixed, strict=True)]
    levels = _levels(layers)
    if len(set(keys)) > limit:  # 2. one group per operation and level
        keys = [(la.op, lv) for la, lv in zip(layers, levels, strict=True)]
    if len(set(keys)) > limit:  # 3. bands of consecutive levels
        band = -(-(max(levels) + 1) // limit)
        keys = [lv // band for lv in levels]
    return _numbered(_quotient(layers, keys, index))


def _numbered(groups: list[Group]) -> list[Group]:
    """Groups that would read the same get ``#1``, ``#2``... in topological order, so edges and rows can be
    told apart."""
    counts = Counter(g.label for g in groups)
    seen: Counter[str] = Counter()
    numbered = []
    for g in groups:
        if counts[g.label] > 1:
            seen[g.label] += 1
            g = dataclasses.replace(g, label=f"{g.label} #{seen[g.label]}")
        numbered.append(g)
    return numbered


def _label(members: Sequence[LayerInfo]) -> str:
    """``'add'``, ``'add ×100'``, ``'mul ×60, add ×60'``."""
    ops = Counter(la.op for la in members)
    return ", ".join(op if n == 1 else f"{op} ×{n}" for op, n in ops.items())


def _quotient(layers: Sequence[LayerInfo], keys: Sequence[Hashable], index: dict[str, int]) -> list[Group]:
    gid: dict[Hashable, int] = {}
    for k in keys:
        gid.setdefault(k, len(gid))
    members: list[list[LayerInfo]] = [[] for _ in gid]
    deps: list[set[int]] = [set() for _ in gid]
    for la, k in zip(layers, keys, strict=True):
        g = gid[k]
        members[g].append(la)
        deps[g].update(gid[keys[index[d]]] for d in la.dependencies if d in index)
        deps[g].discard(g)
    groups = []
    for g, mem in enumerate(members):
        ops = tuple(dict.fromkeys(la.op for la in mem))
        sizes = [la.nbytes for la in mem]
        libraries = {_chunk_library(la.chunk_type) for la in mem if la.chunk_type}
        groups.append(
            Group(
                label=_label(mem),
                ops=ops,
                members=tuple(la.name for la in mem),
                tasks=sum(la.tasks for la in mem),
                nbytes=None if any(s is None for s in sizes) else float(sum(s or 0.0 for s in sizes)),
                chunk_library=libraries.pop() if len(libraries) == 1 else "other",
                dependencies=tuple(sorted(deps[g])),
            )
        )
    return groups


def _optimized_tasks(obj: Any, expr: Any, tasks: int) -> tuple[int | None, bool]:
    """(tasks after optimization, exact) or (None, False) when it cannot be told cheaply."""
    try:
        if expr is not None:
            if not hasattr(expr, "numblocks"):
                return None, False
            return sum(la.tasks for la in expr_layers(expr.optimize())), False
        if tasks <= EXACT_LIMIT:
            import dask

            (optimized,) = dask.optimize(obj)
            return len(optimized.__dask_graph__()), True
        from dask.blockwise import optimize_blockwise

        hlg = obj.__dask_graph__()
        fused = optimize_blockwise(hlg, keys=list(obj.__dask_layers__()))
        return sum(hlg_layer_tasks(layer)[0] for layer in fused.layers.values()), False
    except Exception as error:  # dask's optimisation may fail any way on a graph: the count is unknown
        dropped("counting the fused graph's tasks", error)
        return None, False


def _plain_attr(obj: Any, attr: str) -> str | None:
    """``obj.attr`` as a string, skipping ``__getattr__`` fallbacks (a Delayed invents any attribute)."""
    try:
        value = object.__getattribute__(obj, attr)
    except AttributeError:
        return None
    return value if isinstance(value, str) else None


def _describe(obj: Any) -> str:
    name = _plain_attr(obj, "name") or _plain_attr(obj, "key") or ""
    module = type(obj).__module__
    family = "dask.array" if module.startswith("dask.array") else f"{module.split('.')[0]}.{type(obj).__name__}"
    return f"{family}<{name}>" if name else family


@dataclass(frozen=True)
class GraphSummary:
    """A dask collection's task graph, summarized per layer; displays as text, HTML and SVG."""

    description: str
    layers: tuple[LayerInfo, ...]
    tasks_optimized: int | None
    optimized_exact: bool
    expression: bool

    @property
    def tasks(self) -> int:
        return sum(la.tasks for la in self.layers)

    @property
    def estimated(self) -> bool:
        return any(la.estimated for la in self.layers)

    def groups(self) -> list[Group]:
        return group_layers(self.layers)

    def headline(self) -> str:
        unit = "expression node" if self.expression else "layer"
        n = len(self.layers)
        text = f"{'~' if self.estimated else ''}{self.tasks:,} tasks in {n:,} {unit}{'s' if n != 1 else ''}"
        if self.tasks_optimized is None:
            return text + "; after optimization: unknown"
        how = "" if self.optimized_exact else "~"
        note = "" if self.optimized_exact or self.expression else " (blockwise fusion; low-level fusion may merge more)"
        return text + f"; after optimization: {how}{self.tasks_optimized:,} tasks{note}"

    def to_svg(self) -> str:
        """The layers as a compact layered DAG (aggregated above ``MAX_NODES`` layers)."""
        groups = self.groups()
        top = max((g.tasks for g in groups), default=1)
        nodes = [
            svg.DagNode(
                label=g.label,
                detail=f"{g.tasks:,} task{'s' if g.tasks != 1 else ''} · {format_bytes(g.nbytes)}",
                title=_title(g),
                chunk_library=g.chunk_library,
                weight=math.log1p(g.tasks) / math.log1p(top),
            )
            for g in groups
        ]
        edges = [(d, i) for i, g in enumerate(groups) for d in g.dependencies]
        return svg.layered_dag(nodes, edges)

    def _rows(self) -> list[tuple[str, str, str, str, str]]:
        groups = self.groups()
        return [
            (
                g.label,
                f"{g.tasks:,}",
                format_bytes(g.nbytes),
                ", ".join(groups[d].label for d in g.dependencies) or DASH,
                _title(g),
            )
            for g in groups
        ]

    def text(self) -> str:
        """Plain-text rendering: headline and one line per (aggregated) layer."""
        rows = self._rows()
        width = max((len(r[0]) for r in rows), default=5)
        width = min(max(width, 5), 40)
        lines = [f"Task graph of {self.description}: {self.headline()}"]
        lines.append(f"  {'layer':<{width}} {'tasks':>12} {'bytes':>10}  depends on")
        for label, tasks, nbytes, deps, _ in rows:
            lines.append(f"  {svg.shorten(label, width):<{width}} {tasks:>12} {nbytes:>10}  {svg.shorten(deps, 60)}")
        return "\n".join(lines)

    def html(self) -> str:
        """HTML rendering: headline, DAG and table; every name escaped."""
        cell = 'style="padding:2px 8px;text-align:left"'
        right = 'style="padding:2px 8px;text-align:right"'
        body = "".join(
            f'<tr><td {cell} title="{svg.escape(title)}">{svg.escape(label)}</td><td {right}>{tasks}</td>'
            f"<td {right}>{svg.escape(nbytes)}</td><td {cell}>{svg.escape(svg.shorten(deps, 80))}</td></tr>"
            for label, tasks, nbytes, deps, title in self._rows()
        )
        return (
            f'<div class="gpu-magics-graph" style="{STYLE}">'
            f'<div style="font-family:monospace">Task graph of {svg.escape(self.description)}</div>'
            f"<div>{svg.escape(self.headline())}</div>"
            '<div style="display:flex;flex-wrap:wrap;gap:16px;align-items:flex-start">'
            f'<div style="max-width:100%;overflow:auto">{self.to_svg()}</div>'
            f'<table style="border-collapse:collapse"><thead><tr><th {cell}>Layer</th><th {right}>Tasks</th>'
            f"<th {right}>Bytes</th><th {cell}>Depends on</th></tr></thead><tbody>{body}</tbody></table>"
            "</div></div>"
        )

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, str]:
        return {"text/plain": self.text(), "text/html": self.html()}

    def __repr__(self) -> str:
        return self.text()


def _title(group: Group) -> str:
    names = list(group.members[:12])
    more = len(group.members) - len(names)
    return "\n".join(names + ([f"… and {more:,} more"] if more > 0 else []))


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


def graph_summary(obj: Any) -> GraphSummary:
    """Summarize the task graph of a dask collection (array, dataframe, bag, delayed) without computing it."""
    if not is_collection(obj):
        raise TypeError(f"not a dask collection: {type(obj).__module__}.{type(obj).__qualname__}")
    expr = expr_of(obj)
    layers = expr_layers(expr) if expr is not None else hlg_layers(obj.__dask_graph__())
    tasks = sum(la.tasks for la in layers)
    optimized, exact = _optimized_tasks(obj, expr, tasks)
    return GraphSummary(_describe(obj), tuple(layers), optimized, exact, expr is not None)
