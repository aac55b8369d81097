"""A graph's layers grouped for drawing: at most ``MAX_NODES`` boxes that still form a DAG (chains, then
operation per level, then level bands)."""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Hashable, Sequence
from dataclasses import dataclass

from gpu_magics.display.objects.graph_layers import LayerInfo, chunk_library

MAX_NODES = 60
DETAILED = 8  # graphs of up to this many layers show every layer; larger ones collapse plain chains
MIN_CHAIN = 3  # the shortest chain of different operations drawn as one box


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
        libraries = {chunk_library(la.chunk_type) for la in mem if la.chunk_type}
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
