"""Task-graph summaries (``graph_summary``): a collection's layers (or expression nodes) with task counts, bytes
and a layered DAG in SVG, from its layers as ``objects.graph_layers`` reads them, grouped for drawing above
``MAX_NODES`` layers by ``objects.graph_groups``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from gpu_magics.display import svg
from gpu_magics.display.format import DASH, STYLE, format_bytes
from gpu_magics.display.objects.graph_groups import Group, group_layers
from gpu_magics.display.objects.graph_layers import (
    EXACT_LIMIT,
    LayerInfo,
    expr_layers,
    expr_of,
    hlg_layer_tasks,
    hlg_layers,
    is_collection,
    worked_out,
)

__all__ = ["GraphSummary", "LayerInfo", "graph_summary", "is_collection"]


def _optimized_tasks(obj: Any, expr: Any, tasks: int) -> tuple[int | None, bool]:
    """(tasks after optimization, exact) or (None, False) when it cannot be told cheaply."""
    unknown: tuple[int | None, bool] = (None, False)
    return worked_out("counting the fused graph's tasks", lambda: _optimized_count(obj, expr, tasks), unknown)


def _optimized_count(obj: Any, expr: Any, tasks: int) -> tuple[int | None, bool]:
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


def graph_summary(obj: Any) -> GraphSummary:
    """Summarize the task graph of a dask collection (array, dataframe, bag, delayed) without computing it."""
    if not is_collection(obj):
        raise TypeError(f"not a dask collection: {type(obj).__module__}.{type(obj).__qualname__}")
    expr = expr_of(obj)
    layers = expr_layers(expr) if expr is not None else hlg_layers(obj.__dask_graph__())
    tasks = sum(la.tasks for la in layers)
    optimized, exact = _optimized_tasks(obj, expr, tasks)
    return GraphSummary(_describe(obj), tuple(layers), optimized, exact, expr is not None)
