"""The chunk-size rule shared by the array display's hint and the ``%%gpurun`` advice: a task should do at least
``WORK_PER_OVERHEAD`` times its fixed cost in work, else chunks should grow by the missing factor (keeping at
least two chunks per worker, so every GPU still has work)."""

from __future__ import annotations

import math
from collections.abc import Sequence

WORK_PER_OVERHEAD = 4.0  # a task's work against its fixed cost (scheduling, messages, launching)
WORTH_SAYING = 2.0  # suggest bigger chunks only when they should grow at least this many times


def growth_factor(work_s: float, overhead_s: float) -> float:
    """How many times more work each task needs so that its work is ``WORK_PER_OVERHEAD`` times its fixed
    cost (1.0: enough already)."""
    if work_s <= 0 or overhead_s <= 0:
        return 1.0
    return max(1.0, WORK_PER_OVERHEAD * overhead_s / work_s)


def _nice(value: float) -> int:
    """``value`` rounded to two significant digits (14142 -> 14000)."""
    if value < 100:
        return max(1, round(value))
    scale = 10 ** (int(math.log10(value)) - 1)
    return int(round(value / scale) * scale)


def grown_chunks(
    shape: Sequence[int], chunksize: Sequence[int], factor: float, *, min_chunks: int = 2
) -> tuple[int, ...] | None:
    """Chunk sizes up to ``factor`` times larger in elements, spread over the axes that are split, and grown no
    further than leaves ``min_chunks`` chunks (parallel work for every worker); ``None`` when no such growth
    gives fewer chunks."""
    split_axes = [axis for axis, (size, chunk) in enumerate(zip(shape, chunksize, strict=True)) if chunk < size]
    if factor < WORTH_SAYING or not split_axes:
        return None
    before = _count(shape, chunksize)
    per_axis = factor ** (1 / len(split_axes))
    while per_axis > 1.0:
        grown = list(chunksize)
        for axis in split_axes:
            pieces = math.ceil(shape[axis] / min(int(shape[axis]), _nice(chunksize[axis] * per_axis)))
            grown[axis] = math.ceil(shape[axis] / pieces)  # even pieces: 4000 in 2 of 2000, not 3300 + 700
        count = _count(shape, grown)
        if min_chunks <= count < before:
            return tuple(grown)
        per_axis *= 0.8
    return None


def even_chunks(shape: Sequence[int], chunksize: Sequence[int], workers: int) -> tuple[int, ...] | None:
    """Chunk sizes close to ``chunksize`` whose count is a multiple of ``workers``, at least two for each (every
    GPU gets the same number of chunks), changing at most the two most split axes; ``None`` where there are none
    or the chunks already divide evenly."""
    before = _count(shape, chunksize)
    if workers < 2 or (before % workers == 0 and before >= 2 * workers):
        return None
    axes = sorted(
        (axis for axis, (size, chunk) in enumerate(zip(shape, chunksize, strict=True)) if size > 1),
        key=lambda axis: -math.ceil(shape[axis] / chunksize[axis]),
    )[:2]
    if not axes:
        return None
    best: tuple[tuple[float, float], tuple[int, ...]] | None = None
    ranges = [
        range(1, min(int(shape[axis]), 2 * math.ceil(shape[axis] / chunksize[axis]) + 2 * workers) + 1) for axis in axes
    ]
    for pieces in _product(ranges):
        chunks = list(chunksize)
        for axis, count in zip(axes, pieces, strict=True):
            chunks[axis] = math.ceil(shape[axis] / count)
        count = _count(shape, chunks)
        if count % workers or count < 2 * workers:
            continue
        shape_change = sum(abs(math.log(new / old)) for new, old in zip(chunks, chunksize, strict=True))
        distance = (abs(math.log(count / before)), shape_change)
        if best is None or distance < best[0]:
            best = (distance, tuple(chunks))
    return None if best is None else best[1]


def _product(ranges: Sequence[range]) -> list[tuple[int, ...]]:
    combos: list[tuple[int, ...]] = [()]
    for values in ranges:
        combos = [(*combo, value) for combo in combos for value in values]
    return combos


def _count(shape: Sequence[int], chunks: Sequence[int]) -> int:
    return math.prod(math.ceil(size / chunk) for size, chunk in zip(shape, chunks, strict=True))


def format_chunks(chunks: Sequence[int]) -> str:
    """``'20000'`` when every axis has the same size, else ``'(20000, 5000)'``."""
    if len(set(chunks)) == 1:
        return str(chunks[0])
    return "(" + ", ".join(str(c) for c in chunks) + ")"
