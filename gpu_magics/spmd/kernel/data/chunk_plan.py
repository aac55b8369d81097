"""Which rank gets which chunk of a persisted dask array: each chunk goes to a rank whose worker holds it already,
then, where the ranks' shares are uneven, chunks move from the fullest rank to the emptiest one while that evens
them out, choosing the moves that cost the fewest bytes (a chunk that the emptier rank's worker holds a copy of
moves for free). Pure: the chunks' sizes and holders in, a plan out; tested without a cluster.

A move happens only where it makes the two ranks' shares closer (the chunk is smaller than their difference), so
equal chunks end at most one chunk apart, having moved the fewest chunks that takes.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Move:
    """Chunk ``index`` is copied from worker ``source`` to worker ``target`` (``nbytes`` over the network)."""

    index: int
    source: str
    target: str
    nbytes: int


@dataclass(frozen=True)
class Plan:
    owners: tuple[int, ...]  # per chunk: the position in ``workers`` of the rank that gets it
    moves: tuple[Move, ...]
    loads: tuple[int, ...]  # bytes per rank, in the order of ``workers``

    @property
    def moved_bytes(self) -> int:
        return sum(move.nbytes for move in self.moves)

    def counts(self) -> tuple[int, ...]:
        """Chunks per rank, in the order of ``workers``."""
        return tuple(self.owners.count(position) for position in range(len(self.loads)))


def plan(sizes: Sequence[int], holders: Sequence[Collection[str]], workers: Sequence[str]) -> Plan:
    """Give each chunk (``sizes[i]`` bytes, held by the workers ``holders[i]``) to one of the ranks whose workers
    are ``workers`` (one per rank, in rank order)."""
    if not workers:
        raise ValueError("no ranks to give the chunks to")
    position = {address: index for index, address in enumerate(workers)}
    loads = [0] * len(workers)
    owners: list[int] = [-1] * len(sizes)
    by_size = sorted(range(len(sizes)), key=lambda index: (-sizes[index], index))
    for index in by_size:  # a chunk held by several ranks' workers goes to the least loaded of them
        here = [position[address] for address in holders[index] if address in position]
        if here:
            owners[index] = min(here, key=lambda rank: (loads[rank], rank))
            loads[owners[index]] += sizes[index]
    for index in by_size:  # held only by workers without a rank here: to the least loaded rank
        if owners[index] < 0:
            owners[index] = min(range(len(workers)), key=lambda rank: (loads[rank], rank))
            loads[owners[index]] += sizes[index]
    while True:
        fullest = max(range(len(workers)), key=lambda rank: (loads[rank], -rank))
        emptiest = min(range(len(workers)), key=lambda rank: (loads[rank], rank))
        gap = loads[fullest] - loads[emptiest]
        movable = [index for index, owner in enumerate(owners) if owner == fullest and 0 < sizes[index] < gap]
        if not movable:
            break

        def cost(index: int, target: int = emptiest, gap: int = gap) -> tuple[int, int, int]:
            paid = 0 if workers[target] in holders[index] else sizes[index]
            return (paid, abs(gap - 2 * sizes[index]), index)  # the cheapest, then the one that evens out most

        chosen = min(movable, key=cost)
        owners[chosen] = emptiest
        loads[fullest] -= sizes[chosen]
        loads[emptiest] += sizes[chosen]
    moves = tuple(
        Move(index, sorted(holders[index])[0] if holders[index] else "", workers[owner], sizes[index])
        for index, owner in enumerate(owners)
        if workers[owner] not in holders[index]
    )
    return Plan(tuple(owners), moves, tuple(loads))
