"""Rich display of a dask array: chunk grid, sizes, chunk type, graph size, GPU memory fit and hints.

Works for classic arrays (``HighLevelGraph``) and array expressions (``array.query-planning``) alike, from
metadata only: it never computes the array nor materializes its task graph.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from gpu_magics.arrays import chunk_advice
from gpu_magics.display import svg
from gpu_magics.display.format import MUTED, STYLE, WARN, format_bytes
from gpu_magics.text.units import dropped

# A distributed task costs about 1 ms of scheduling; one 10000 x 10000 float64 chunk (800e6 bytes, 763 MiB) of the
# seed workload takes about 4 ms of GPU time on an H200; chunk_advice says when overhead dominates that work.
TASK_OVERHEAD_S = 1e-3
REFERENCE_CHUNK_BYTES = 800e6
REFERENCE_CHUNK_S = 4e-3
LARGE_CHUNK_FRACTION = 0.25  # an operation holds several chunks at once: warn above a quarter of a GPU

_HINT_BACKGROUND = f"background:color-mix(in srgb,{WARN} 12%,transparent)"  # a tint that suits both themes

GpuMemoryProbe = Callable[[], "tuple[int, ...] | None"]
# Where an array whose chunks are of a library (numpy, cupy) is computed as the session stands: (where, fix or None).
PlacementProbe = Callable[[str], "tuple[str, str | None] | None"]


def _inventory_memory() -> tuple[int, ...] | None:
    """Total memory of each visible GPU, from the GPU inventory; None if unknown."""
    from gpu_magics import gpus

    return gpus.memory_totals()


_probe: GpuMemoryProbe = _inventory_memory
_cache: list[tuple[int, ...] | None] = []
_placement: PlacementProbe | None = None


def set_placement_probe(probe: PlacementProbe | None) -> None:
    """Say how to learn where an array is computed (``%load_ext`` sets the session's; ``None``: not shown)."""
    global _placement
    _placement = probe


Found = TypeVar("Found")


def _unless_failing(what: str, ask: Callable[[], Found], failed: Found) -> Found:
    """``ask()``, or ``failed`` where it fails (``what`` failed, in the debug log): the view shows less, never
    breaks."""
    try:
        return ask()
    except Exception as error:  # a probe (no GPU, broken CUDA) or a graph's layers may fail any way when read
        dropped(what, error)
        return failed


def _computed_on(chunk_library: str) -> tuple[str, str | None] | None:
    placement = _placement
    if placement is None:
        return None
    return _unless_failing("asking where the array is computed", lambda: placement(chunk_library), None)


def set_gpu_memory_probe(probe: GpuMemoryProbe | None) -> None:
    """Replace how visible GPU memory is found (None: back to the GPU inventory); clears the cached answer."""
    global _probe
    _probe = probe if probe is not None else _inventory_memory
    _cache.clear()


def visible_gpu_memory() -> tuple[int, ...] | None:
    """Total bytes of each visible GPU (asked once, then cached), or None when unknown."""
    if not _cache:
        _cache.append(_unless_failing("asking the visible GPUs' memory", _probe, None))
    return _cache[0]


def chunk_library(meta: object) -> str:
    """``'numpy'``, ``'cupy'`` or ``'other'`` from a chunk's (meta) type."""
    root = type(meta).__module__.split(".")[0]
    return {"numpy": "numpy", "cupy": "cupy", "cupyx": "cupy"}.get(root, "other")


def _meta_device(meta: object) -> int | None:
    device = getattr(meta, "device", None)
    ident = getattr(device, "id", None)
    return ident if isinstance(ident, int) else None


def _axis_max(chunks: Sequence[float]) -> float:
    total = float(sum(chunks))
    return math.nan if math.isnan(total) else float(max(chunks, default=0))


def graph_size(array: Any) -> tuple[int, int, bool]:
    """(tasks, layers, estimated) of a dask array's graph, without materializing it."""
    from gpu_magics.display.objects.graph_layers import expr_layers, expr_of, hlg_counts

    expr = expr_of(array)
    if expr is not None:
        layers = expr_layers(expr)
        return sum(la.tasks for la in layers), len(layers), True

    hlg = array.__dask_graph__()
    counts = hlg_counts(getattr(hlg, "layers", {"": hlg})).values()
    return sum(c for c, _ in counts), len(counts), any(e for _, e in counts)


def _is_expression(array: Any) -> bool:
    from gpu_magics.display.objects.graph_layers import expr_of

    return expr_of(array) is not None


@dataclass(frozen=True)
class ArrayInfo:
    """What the display shows about one dask array (all from metadata)."""

    name: str
    shape: tuple[float, ...]
    dtype: str
    itemsize: int
    chunks: tuple[tuple[float, ...], ...]
    chunksize: tuple[float, ...]  # the largest chunk along each axis (NaN when unknown)
    chunk_type: str  # e.g. "cupy.ndarray"
    chunk_library: str  # numpy, cupy or other
    device: int | None
    tasks: int
    layers: int
    tasks_estimated: bool
    gpu_memory: tuple[int, ...] | None
    expression: bool
    hints: tuple[str, ...] = field(default=())
    computed_on: str | None = None  # where it is computed as the session stands (the cluster's GPUs, ...)

    @property
    def numblocks(self) -> tuple[int, ...]:
        return tuple(len(c) for c in self.chunks)

    @property
    def nchunks(self) -> int:
        return math.prod(self.numblocks)

    @property
    def nbytes(self) -> float:
        return math.prod(self.shape) * self.itemsize

    @property
    def chunk_nbytes(self) -> float:
        return math.prod(self.chunksize) * self.itemsize

    @property
    def where(self) -> str:
        if self.chunk_library == "cupy":
            return "GPU" if self.device is None else f"GPU {self.device}"
        return "CPU" if self.chunk_library == "numpy" else "unknown"

    def memory_lines(self) -> list[str]:
        """Whether one chunk and the whole array fit in the visible GPUs' memory."""
        gpus = self.gpu_memory
        if not gpus:
            return ["no GPU visible"]
        smallest, total, n = min(gpus), sum(gpus), len(gpus)
        chunk, whole = self.chunk_nbytes, self.nbytes
        lines = []
        if math.isnan(chunk):
            lines.append("one chunk: size unknown")
        else:
            verdict = "fits in" if chunk <= smallest else "does NOT fit in"
            lines.append(f"one chunk ({format_bytes(chunk)}) {verdict} one GPU ({format_bytes(smallest)})")
        gpus_text = f"{n} visible GPU{'s' if n > 1 else ''} ({format_bytes(total)})"
        if math.isnan(whole):
            lines.append("whole array: size unknown")
        elif whole <= total:
            lines.append(f"whole array ({format_bytes(whole)}) fits in {gpus_text}")
        else:
            lines.append(
                f"whole array ({format_bytes(whole)}) does NOT fit in {gpus_text}: "
                f"{whole / total:.1f}x their memory; reduce it chunk by chunk rather than persist it"
            )
        return lines


def _suggest(info_shape: Sequence[float], chunksize: Sequence[float], dtype: Any, limit: float) -> str:
    try:
        from dask.array.core import normalize_chunks

        new = normalize_chunks(
            "auto",
            tuple(int(s) for s in info_shape),
            limit=int(limit),
            dtype=dtype,
            previous_chunks=tuple(int(c) for c in chunksize),
        )
        return f"x.rechunk({svg.format_shape(tuple(max(c) for c in new))})"
    except (ValueError, TypeError, NotImplementedError, ArithmeticError) as error:  # a dtype or shape "auto" cannot
        # size (object dtype, zero itemsize, an empty axis): the generic hint instead
        dropped("working out a rechunk hint", error)
        return 'x.rechunk({...: "auto"})'


def _hints(
    shape: Sequence[float],
    chunksize: Sequence[float],
    dtype: Any,
    chunk_library: str,
    chunk_nbytes: float,
    nchunks: int,
    gpus: tuple[int, ...] | None,
) -> tuple[str, ...]:
    hints = []
    if math.isnan(chunk_nbytes) or any(isinstance(s, float) and math.isnan(s) for s in shape):
        return ()
    smallest = min(gpus) if gpus else None
    work = chunk_nbytes / REFERENCE_CHUNK_BYTES * REFERENCE_CHUNK_S
    factor = chunk_advice.growth_factor(work, TASK_OVERHEAD_S)  # the rule %%gpurun's advice follows too
    grown = chunk_advice.grown_chunks([int(s) for s in shape], [int(c) for c in chunksize], factor)
    if chunk_library == "cupy" and nchunks > 1 and grown is not None:
        hints.append(
            f"Chunks of {format_bytes(chunk_nbytes)} are small for a GPU: about {work * 1e3:.2g} ms of GPU work a "
            f"task against {TASK_OVERHEAD_S * 1e3:.0f} ms of scheduling; try {factor:.0f}x larger, "
            f"x.rechunk({svg.format_shape(grown)})."
        )
    if smallest is not None and chunk_nbytes > LARGE_CHUNK_FRACTION * smallest:
        hints.append(
            f"Chunks of {format_bytes(chunk_nbytes)} are too large for one GPU's {format_bytes(smallest)} (an "
            f"operation holds inputs, outputs, temporaries): try {_suggest(shape, chunksize, dtype, smallest / 8)}."
        )
    return tuple(hints)


def array_info(array: Any, gpu_memory: tuple[int, ...] | bool | None = True) -> ArrayInfo:
    """Collect an :class:`ArrayInfo` from ``array``'s metadata (``gpu_memory=True``: ask the probe)."""
    meta = getattr(array, "_meta", None)
    library = chunk_library(meta)
    gpus = visible_gpu_memory() if gpu_memory is True else (gpu_memory or None)
    chunks = tuple(tuple(c) for c in array.chunks)
    chunksize = tuple(_axis_max(c) for c in chunks)
    dtype = array.dtype
    tasks, layers, estimated = graph_size(array)
    shape = tuple(array.shape)
    chunk_nbytes = math.prod(chunksize) * dtype.itemsize
    nchunks = math.prod(len(c) for c in chunks)
    placed = _computed_on(library)
    hints = _hints(shape, chunksize, dtype, library, chunk_nbytes, nchunks, gpus)
    if placed is not None and placed[1]:
        hints = (f"Computed on {placed[0]}: {placed[1]}.", *hints)
    if data_gone(array):
        placed = ("nowhere: its data is gone", None)
        hints = (GONE_HINT, *hints)
    return ArrayInfo(
        name=str(getattr(array, "name", "")),
        shape=shape,
        dtype=str(dtype),
        itemsize=int(dtype.itemsize),
        chunks=chunks,
        chunksize=chunksize,
        chunk_type=f"{type(meta).__module__.split('.')[0]}.{type(meta).__name__}",
        chunk_library=library,
        device=_meta_device(meta) if library == "cupy" else None,
        tasks=tasks,
        layers=layers,
        tasks_estimated=estimated,
        gpu_memory=gpus,
        expression=_is_expression(array),
        hints=hints,
        computed_on=None if placed is None else placed[0],
    )


GONE_HINT = (
    "Its chunks were kept on a cluster that was stopped (or lost them): run the cells that made it again, "
    "and persist it again if you want it kept."
)


def data_gone(collection: Any, look_at: int = 64) -> bool:
    """Whether ``collection`` was persisted on a cluster and its data is gone: the futures in its graph were
    cancelled or lost, or their client closed (looks at its first ``look_at`` graph values only)."""
    read = functools.partial(_first_values, collection, look_at)
    values: list[Any] = _unless_failing("looking for futures in the graph", read, [])
    for value in values:
        if type(value).__name__ == "Future" and type(value).__module__.startswith("distributed"):
            client = getattr(value, "client", None)
            return value.status in ("cancelled", "lost") or getattr(client, "status", "running") == "closed"
    return False


def _first_values(collection: Any, look_at: int) -> list[Any]:
    """The first ``look_at`` values of each layer of ``collection``'s graph that is built already."""
    graph = collection.__dask_graph__()
    layers = getattr(graph, "layers", {"": graph}).values()
    kept = [layer for layer in layers if getattr(layer, "is_materialized", lambda: True)()]  # not built here
    return [value for layer in kept for _, value in zip(range(look_at), layer.values(), strict=False)]


class ArrayView:
    """A dask array's rich display: ``text/plain`` and ``text/html`` (with an SVG chunk grid)."""

    def __init__(self, array: Any, gpu_memory: tuple[int, ...] | bool | None = True) -> None:
        self.info = array_info(array, gpu_memory)

    def _rows(self) -> list[tuple[str, str, str]]:
        i = self.info
        grid = " × ".join(f"{n:,}" for n in i.numblocks) + " = " if len(i.numblocks) > 1 else ""
        tasks = f"{'~' if i.tasks_estimated else ''}{i.tasks:,} task{'s' if i.tasks != 1 else ''}"
        layer = "expression node" if i.expression else "graph layer"
        return [
            ("Shape", svg.format_shape(i.shape), svg.format_shape(i.chunksize)),
            ("Bytes", format_bytes(i.nbytes), format_bytes(i.chunk_nbytes) + " (largest)"),
            ("Chunks", f"{grid}{i.nchunks:,}", ""),
            ("Dtype", i.dtype, ""),
            ("Chunk type", i.chunk_type, i.where),
            ("Graph", f"{tasks} in {i.layers:,} {layer}{'s' if i.layers != 1 else ''}", ""),
            *([("Computed on", i.computed_on, "")] if i.computed_on else []),
        ]

    def text(self) -> str:
        """Plain-text rendering (terminal IPython, saved notebooks without HTML)."""
        i = self.info
        head = (
            f"dask.array<{i.name}, shape={svg.format_shape(i.shape)}, dtype={i.dtype}, "
            f"chunksize={svg.format_shape(i.chunksize)}, chunktype={i.chunk_type}>"
        )
        rows = {label: (whole, chunk) for label, whole, chunk in self._rows()}
        lines = [
            head,
            f"  {'Bytes':<11} {rows['Bytes'][0]} in all, {format_bytes(i.chunk_nbytes)} per chunk (largest)",
            f"  {'Chunks':<11} {rows['Chunks'][0]}",
            f"  {'Chunk type':<11} {i.chunk_type} ({i.where})",
            f"  {'Graph':<11} {rows['Graph'][0]}",
        ]
        if i.computed_on:
            lines.append(f"  {'Computed on':<11} {i.computed_on}")
        lines.append(f"  {'GPU memory':<11} " + "; ".join(i.memory_lines()))
        lines += [f"  hint: {h}" for h in i.hints]
        return "\n".join(lines)

    def html(self) -> str:
        """HTML rendering: a table beside the chunk grid, then GPU memory and hints."""
        i = self.info
        cell = 'style="padding:2px 8px;text-align:left"'
        rows = "".join(
            f"<tr><th {cell}>{svg.escape(k)}</th><td {cell}>{svg.escape(a)}</td><td {cell}>{svg.escape(c)}</td></tr>"
            for k, a, c in self._rows()
        )
        memory = "<br>".join(svg.escape(line) for line in i.memory_lines())
        muted = cell if i.gpu_memory else f'style="padding:2px 8px;text-align:left;{MUTED}"'
        rows += f'<tr><th {cell}>GPU memory</th><td {muted} colspan="2">{memory}</td></tr>'
        extra = ""
        if len(i.chunks) > 3:
            lead = " × ".join(f"{len(c):,}" for c in i.chunks[:-3])
            extra = f'<div style="{svg.LABEL}">last 3 of {len(i.chunks)} axes; leading axes: {lead} chunks</div>'
        hints = "".join(
            f'<div style="margin-top:4px;padding:4px 8px;border-left:3px solid {WARN};{_HINT_BACKGROUND}">'
            f"{svg.escape(h)}</div>"
            for h in i.hints
        )
        return (
            f'<div class="gpu-magics-array" style="{STYLE}">'
            f'<div style="font-family:monospace;margin-bottom:4px">dask.array&lt;{svg.escape(i.name)}&gt;</div>'
            '<div style="display:flex;flex-wrap:wrap;gap:16px;align-items:flex-start">'
            f'<table style="border-collapse:collapse"><thead><tr><th {cell}></th><th {cell}>Array</th>'
            f"<th {cell}>Chunk</th></tr></thead><tbody>{rows}</tbody></table>"
            f"<div>{svg.chunk_grid(i.chunks, i.chunk_library)}{extra}</div></div>{hints}</div>"
        )

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, str]:
        return {"text/plain": self.text(), "text/html": self.html()}

    def __repr__(self) -> str:
        return self.text()
