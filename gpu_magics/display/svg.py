"""Pure SVG and text helpers for the displays: no dask, no IPython, no widgets.

Everything here works on plain numbers and strings, so the output size is bounded by construction: a chunk
grid draws at most ``max_lines`` boundaries per axis and a DAG at most the nodes it is given.
"""

from __future__ import annotations

import html
import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

# Fill and stroke per chunk library: numpy (CPU), cupy (GPU), anything else.
COLOURS: dict[str, tuple[str, str]] = {
    "numpy": ("#cfe2f3", "#2f6a9e"),
    "cupy": ("#d9efc2", "#4b7f1e"),
    "other": ("#e6e6e6", "#6b6b6b"),
}
# Labels of the drawings: the size fits the boxes; the family is inherited from the display's ``format.STYLE``.
LABEL = "font-size:var(--jp-ui-font-size0,11px)"


def escape(text: object) -> str:
    """HTML/SVG-escape any value's ``str``, quotes included."""
    return html.escape(str(text), quote=True)


def format_shape(shape: Sequence[float]) -> str:
    """``(10, nan)`` -> ``'(10, ?)'``."""
    inner = ", ".join("?" if isinstance(s, float) and math.isnan(s) else str(int(s)) for s in shape)
    return f"({inner},)" if len(shape) == 1 else f"({inner})"


def shorten(text: str, limit: int) -> str:
    """Cut ``text`` to ``limit`` characters with an ellipsis."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def shorten_name(text: str, limit: int) -> str:
    """``shorten``, keeping a trailing count or number: ``'mean_combine-partial-aggregate ×7'`` ->
    ``'mean_combine-partial-a… ×7'``."""
    head, space, tail = text.rpartition(" ")
    if space and tail[:1] in "×#" and len(tail) < limit // 2:
        return text if len(text) <= limit else shorten(head, limit - len(tail) - 1) + " " + tail
    return shorten(text, limit)


@dataclass(frozen=True)
class AxisLines:
    """Where to draw chunk boundaries along one axis, as fractions of its length."""

    positions: tuple[float, ...]
    total: float  # the axis length (NaN when unknown)
    chunks: int
    step: int  # chunks between two drawn lines (1: every boundary)
    known: bool  # False when chunk sizes are unknown (NaN): lines are evenly spaced

    @property
    def title(self) -> str:
        text = f"{self.chunks:,} chunk{'s' if self.chunks != 1 else ''}"
        if self.step > 1:
            text += f", a line every {self.step:,} chunks"
        return text + ("" if self.known else ", sizes unknown")

    @property
    def length(self) -> float:
        """Length used for drawing: the total, or the chunk count when sizes are unknown."""
        return float(self.chunks) if math.isnan(self.total) or self.total <= 0 else self.total

    @property
    def text(self) -> str:
        """The axis length as a label."""
        return "?" if math.isnan(self.total) else f"{int(self.total):,}"


def axis_lines(chunks: Sequence[float], max_lines: int = 64) -> AxisLines:
    """Boundaries of ``chunks`` (one axis), aggregated to at most ``max_lines`` + 1 lines."""
    n = len(chunks)
    step = max(1, -(-n // max_lines))
    total = float(sum(chunks))
    known = not math.isnan(total) and total > 0
    if not known:
        positions = [i / n for i in range(0, n, step)] + [1.0] if n else [0.0, 1.0]
        return AxisLines(tuple(positions), total, n, step, not math.isnan(total))
    sums = chunks if step == 1 else [sum(chunks[i : i + step]) for i in range(0, n, step)]
    acc = 0.0
    out = [0.0]
    for s in sums:
        acc += s
        out.append(acc / total)
    return AxisLines(tuple(out), total, n, step, True)


def _sides(lengths: Sequence[float], size: float, minimum: float = 14.0) -> list[float]:
    """Display lengths: proportional down to a quarter of the longest side, compressed below that."""
    biggest = max(lengths) if lengths else 1.0
    out = []
    for n in lengths:
        r = n / biggest if biggest > 0 else 0.0
        if r < 0.25:
            r = 0.25 * (r / 0.25) ** 0.35
        out.append(max(minimum, size * r))
    return out


def _path(segments: Sequence[tuple[float, float, float, float]]) -> str:
    return "".join(f"M{a:.1f} {b:.1f}L{c:.1f} {d:.1f}" for a, b, c, d in segments)


def chunk_grid(chunks: Sequence[Sequence[float]], chunk_library: str = "numpy", size: float = 170) -> str:
    """An SVG picture of an array's chunk grid, coloured by ``chunk_library`` (numpy, cupy, other).

    Arrays of more than three dimensions draw their last three; a caption elsewhere names the rest.
    """
    fill, stroke = COLOURS.get(chunk_library, COLOURS["other"])
    dims = list(chunks)[-3:]
    axes = [axis_lines(c) for c in dims]
    dash = "" if all(a.known for a in axes) else ' stroke-dasharray="3 2"'
    inner = f'stroke="{stroke}" stroke-width="0.7" fill="none"{dash}'
    title = "; ".join(f"axis {len(chunks) - len(dims) + i}: {a.title}" for i, a in enumerate(axes))
    parts: list[str] = [f"<title>{escape(title or 'a single value')}</title>"]
    if not dims:
        w = h = 24.0
        parts.append(f'<rect x="1" y="1" width="{w}" height="{h}" fill="{fill}" stroke="{stroke}"/>')
        return _svg(parts, w + 2, h + 2)
    if len(dims) == 1:
        (w,) = _sides([axes[0].length], size)
        h = 24.0
        x0, y0 = 2.0, 2.0
        parts.append(f'<rect x="{x0}" y="{y0}" width="{w:.1f}" height="{h}" fill="{fill}"/>')
        parts.append(f'<path d="{_path([(x0 + w * p, y0, x0 + w * p, y0 + h) for p in axes[0].positions])}" {inner}/>')
        parts.append(_outline([(x0, y0), (x0 + w, y0), (x0 + w, y0 + h), (x0, y0 + h)], stroke))
        parts.append(_label(x0 + w / 2, y0 + h + 14, axes[0].text))
        return _svg(parts, w + 4, h + 22)
    if len(dims) == 2:
        h, w = _sides([axes[0].length, axes[1].length], size)
        x0, y0 = 2.0, 2.0
        parts.append(f'<rect x="{x0}" y="{y0}" width="{w:.1f}" height="{h:.1f}" fill="{fill}"/>')
        segs = [(x0 + w * p, y0, x0 + w * p, y0 + h) for p in axes[1].positions]
        segs += [(x0, y0 + h * q, x0 + w, y0 + h * q) for q in axes[0].positions]
        parts.append(f'<path d="{_path(segs)}" {inner}/>')
        parts.append(_outline([(x0, y0), (x0 + w, y0), (x0 + w, y0 + h), (x0, y0 + h)], stroke))
        parts.append(_label(x0 + w / 2, y0 + h + 14, axes[1].text))
        parts.append(_label(x0 + w + 6, y0 + h / 2, axes[0].text, rotate=True))
        return _svg(parts, w + 24, h + 22)
    d, h, w = _sides([a.length for a in axes], size)
    ox = oy = d * 0.45
    x0, y0 = 2.0, 14.0
    fy = y0 + oy  # top of the front face
    top = [(x0, fy), (x0 + ox, y0), (x0 + ox + w, y0), (x0 + w, fy)]
    side = [(x0 + w, fy), (x0 + w + ox, y0), (x0 + w + ox, y0 + h), (x0 + w, fy + h)]
    for face, shade in ((top, 0.85), (side, 0.7)):
        points = " ".join(f"{a:.1f},{b:.1f}" for a, b in face)
        parts.append(f'<polygon points="{points}" fill="{fill}" fill-opacity="{shade}"/>')
    parts.append(f'<rect x="{x0}" y="{fy:.1f}" width="{w:.1f}" height="{h:.1f}" fill="{fill}"/>')
    depth, rows, cols = axes
    segs = [(x0 + w * p, fy, x0 + w * p, fy + h) for p in cols.positions]
    segs += [(x0, fy + h * q, x0 + w, fy + h * q) for q in rows.positions]
    segs += [(x0 + w * p, fy, x0 + w * p + ox, y0) for p in cols.positions]
    segs += [(x0 + ox * r, fy - oy * r, x0 + ox * r + w, fy - oy * r) for r in depth.positions]
    segs += [(x0 + w, fy + h * q, x0 + w + ox, y0 + h * q) for q in rows.positions]
    segs += [(x0 + w + ox * r, fy - oy * r, x0 + w + ox * r, fy - oy * r + h) for r in depth.positions]
    parts.append(f'<path d="{_path(segs)}" {inner}/>')
    parts.append(_outline([*top[:3], side[2], side[3], (x0, fy + h)], stroke))
    parts.append(_label(x0 + w / 2, fy + h + 14, axes[2].text))
    parts.append(_label(x0 + w + ox + 6, y0 + h / 2, axes[1].text, rotate=True))
    parts.append(_label(x0 + ox / 2 - 4, y0 + oy / 2, axes[0].text, anchor="end"))
    return _svg(parts, w + ox + 24, h + oy + 34, left=max(0.0, 70 - ox / 2))


def _outline(points: Sequence[tuple[float, float]], stroke: str) -> str:
    coords = " ".join(f"{a:.1f},{b:.1f}" for a, b in points)
    return f'<polygon points="{coords}" fill="none" stroke="{stroke}" stroke-width="1.5"/>'


def _label(x: float, y: float, text: str, rotate: bool = False, anchor: str = "middle") -> str:
    """Text at (x, y); ``rotate``: reading upwards with its baseline on x + 11 (glyphs left of it)."""
    if rotate:
        x += 11
    turn = f' transform="rotate(-90 {x:.1f} {y:.1f})"' if rotate else ""
    return (
        f'<text x="{x:.1f}" y="{y:.1f}" text-anchor="{anchor}"{turn} style="{LABEL}" fill="currentColor" '
        f'opacity=".8">{escape(text)}</text>'
    )


def _svg(parts: Sequence[str], width: float, height: float, left: float = 0.0) -> str:
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width + left:.0f}" height="{height:.0f}" '
        f'viewBox="{-left:.0f} 0 {width + left:.0f} {height:.0f}" role="img">' + "".join(parts) + "</svg>"
    )


@dataclass(frozen=True)
class DagNode:
    """One box of a layered DAG: a label, a second line, a tooltip, its chunks' library (the colour) and a weight
    in [0, 1]."""

    label: str
    detail: str
    title: str
    chunk_library: str = "other"
    weight: float = 0.0


BOX_W, BOX_H, GAP_X, GAP_Y = 150.0, 36.0, 12.0, 26.0
DUMMY_W = 8.0  # the slot an edge takes on a level it passes through
MAX_WIDTH = 760.0


def dag_levels(count: int, edges: Sequence[tuple[int, int]]) -> list[int]:
    """Longest-path level of each node (sources at 0); ``edges`` go from dependency to dependent."""
    children: list[list[int]] = [[] for _ in range(count)]
    indegree = [0] * count
    for a, b in edges:
        children[a].append(b)
        indegree[b] += 1
    level = [0] * count
    ready = [i for i in range(count) if indegree[i] == 0]
    while ready:
        node = ready.pop()
        for child in children[node]:
            level[child] = max(level[child], level[node] + 1)
            indegree[child] -= 1
            if indegree[child] == 0:
                ready.append(child)
    return level


def _order(rows: dict[int, list[int]], parents: dict[int, list[int]], children: dict[int, list[int]]) -> None:
    """Order each level's nodes by the mean position of their neighbours (down, up, down), in place."""

    def sweep(levels: Sequence[int], neighbours: dict[int, list[int]]) -> None:
        position: dict[int, float] = {}
        for lv in levels:
            row = rows[lv]
            if any(neighbours.get(i) for i in row) and position:
                row.sort(key=lambda i: _mean([position[n] for n in neighbours.get(i, []) if n in position], i))
            position.update((i, k / max(1, len(row))) for k, i in enumerate(row))

    order = sorted(rows)
    sweep(order, parents)
    sweep(order[::-1], children)
    sweep(order, parents)


def _mean(values: Sequence[float], fallback: float) -> float:
    return sum(values) / len(values) if values else fallback


def _fit(label: str) -> str:
    """Attributes that squeeze a long box label into the box."""
    return f' textLength="{BOX_W - 10:.0f}" lengthAdjust="spacingAndGlyphs"' if len(label) > 20 else ""


def _curve(x1: float, y1: float, x2: float, y2: float) -> str:
    mid = (y1 + y2) / 2
    return f"C{x1:.1f} {mid:.1f} {x2:.1f} {mid:.1f} {x2:.1f} {y2:.1f}"


def layered_dag(nodes: Sequence[DagNode], edges: Sequence[tuple[int, int]]) -> str:
    """A top-to-bottom layered drawing of a small DAG (callers aggregate big graphs first).

    An edge that skips levels passes through a narrow slot of its own on every level between (a dummy node), so
    edges go around boxes rather than through them.
    """
    if not nodes:
        return _svg(["<title>empty graph</title>"], 10, 10)
    levels = dag_levels(len(nodes), edges)
    level_of = {i: lv for i, lv in enumerate(levels)}
    parents: dict[int, list[int]] = {}
    children: dict[int, list[int]] = {}
    routes: list[list[int]] = []
    next_id = len(nodes)
    for a, b in edges:
        route = [a]
        for lv in range(level_of[a] + 1, level_of[b]):
            level_of[next_id] = lv
            route.append(next_id)
            next_id += 1
        route.append(b)
        routes.append(route)
        for u, v in itertools.pairwise(route):
            parents.setdefault(v, []).append(u)
            children.setdefault(u, []).append(v)
    rows: dict[int, list[int]] = {}
    for i in sorted(level_of):
        rows.setdefault(level_of[i], []).append(i)
    _order(rows, parents, children)

    def span(i: int) -> float:
        return BOX_W if i < len(nodes) else DUMMY_W

    widths = {lv: sum(span(i) for i in row) + GAP_X * (len(row) - 1) for lv, row in rows.items()}
    width = max(widths.values()) + 4
    x: dict[int, float] = {}
    for lv, row in rows.items():
        left = (width - 4 - widths[lv]) / 2 + 2
        for i in row:
            x[i] = left + span(i) / 2
            left += span(i) + GAP_X
    y = {i: lv * (BOX_H + GAP_Y) + 2 for i, lv in level_of.items()}
    height = (max(levels) + 1) * (BOX_H + GAP_Y) - GAP_Y + 4
    parts = [
        '<defs><marker id="a" viewBox="0 0 6 6" refX="6" refY="3" markerWidth="6" markerHeight="6" '
        'orient="auto"><path d="M0 0L6 3L0 6z" fill="#888"/></marker></defs>'
    ]
    for route in routes:
        start, end = route[0], route[-1]
        path = f"M{x[start]:.1f} {y[start] + BOX_H:.1f}"
        px, py = x[start], y[start] + BOX_H
        for dummy in route[1:-1]:  # through the slot: in at its top, straight down, out at its bottom
            path += _curve(px, py, x[dummy], y[dummy]) + f"L{x[dummy]:.1f} {y[dummy] + BOX_H:.1f}"
            px, py = x[dummy], y[dummy] + BOX_H
        path += _curve(px, py, x[end], y[end])
        parts.append(f'<path d="{path}" fill="none" stroke="#888" stroke-width="1" marker-end="url(#a)"/>')
    for i, node in enumerate(nodes):
        fill, stroke = COLOURS.get(node.chunk_library, COLOURS["other"])
        left, top = x[i] - BOX_W / 2, y[i]
        share = min(1.0, max(0.0, node.weight))
        label = shorten_name(node.label, 26)
        parts.append(
            f'<g><title>{escape(node.title)}</title><rect x="{left:.1f}" y="{top:.1f}" width="{BOX_W}" '
            f'height="{BOX_H}" rx="4" fill="{fill}" stroke="{stroke}"/>'
            f'<rect x="{left + 1:.1f}" y="{top + BOX_H - 4:.1f}" width="{(BOX_W - 2) * share:.1f}" height="3" '
            f'fill="{stroke}" opacity=".6"/>'
            f'<text x="{x[i]:.1f}" y="{top + 15:.1f}" text-anchor="middle" style="{LABEL};font-weight:bold" '
            f'fill="#222"{_fit(label)}>{escape(label)}</text>'
            f'<text x="{x[i]:.1f}" y="{top + 28:.1f}" text-anchor="middle" style="{LABEL}" '
            f'fill="#333">{escape(shorten(node.detail, 28))}</text></g>'
        )
    shown = min(width, MAX_WIDTH)
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{shown:.0f}" height="{height * shown / width:.0f}" '
        f'viewBox="0 0 {width:.0f} {height:.0f}" role="img">' + "".join(parts) + "</svg>"
    )
