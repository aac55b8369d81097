"""Merging the ranks' output lines into what the cell shows: a line that several ranks printed alike shows once
with their ranks (``[0-3] epoch 1 loss 0.52``), a line that differs shows with its rank.

Lines are matched by their position in each rank's output of the cell (its n-th line on stdout or stderr). A
position is shown once every running rank has printed it, or once it has waited ``hold`` seconds (a slow rank's
line then shows alone, later), or when the cell ends. Pure: lines and clocks in, text out.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

HOLD_S = 0.3


def rank_list(ranks: Iterable[int]) -> str:
    """``0-3``, ``0,2``, ``0,1``, ``0-2,5``."""
    ordered = sorted(set(ranks))
    parts: list[str] = []
    start = previous = None
    for rank in [*ordered, None]:
        if start is not None and (rank is None or rank != (previous or 0) + 1):
            if start == previous:
                parts.append(str(start))
            else:
                parts.append(f"{start},{previous}" if previous == start + 1 else f"{start}-{previous}")
            start = None
        if rank is not None and start is None:
            start = rank
        previous = rank
    return ",".join(parts)


@dataclass
class _Position:
    first_seen: float
    texts: dict[int, str] = field(default_factory=dict)  # rank -> its line at this position


@dataclass(frozen=True)
class Shown:
    stream: str  # "out" or "err"
    text: str  # the line with its ranks in front


class LineMerger:
    """The lines of one cell from ``ranks``, merged as they arrive."""

    def __init__(self, ranks: Sequence[int], hold: float = HOLD_S) -> None:
        self.ranks = tuple(ranks)
        self.hold = hold
        self._running = set(ranks)
        self._seen: dict[int, set[int]] = {rank: set() for rank in ranks}  # rank -> sequence numbers taken
        self._counts: dict[tuple[int, str], int] = {}  # (rank, stream) -> lines on that stream so far
        self._positions: dict[tuple[str, int], _Position] = {}
        self._shown: set[tuple[str, int]] = set()

    def add(self, rank: int, lines: Iterable[tuple[int, str, str]], now: float) -> None:
        """Lines ``(seq, stream, text)`` from ``rank`` (a line seen before, by its seq, is ignored)."""
        taken = self._seen.setdefault(rank, set())
        for seq, stream, text in sorted(lines):
            if seq in taken:
                continue
            taken.add(seq)
            index = self._counts.get((rank, stream), 0)
            self._counts[(rank, stream)] = index + 1
            key = (stream, index)
            self._positions.setdefault(key, _Position(now)).texts[rank] = text

    def finished(self, rank: int) -> None:
        """``rank`` prints nothing more in this cell."""
        self._running.discard(rank)

    def ready(self, now: float) -> list[Shown]:
        """The lines to show now, in order on each stream (a position waits for the ones before it)."""
        out: list[Shown] = []
        for stream in ("out", "err"):
            for key in sorted((key for key in self._positions if key[0] == stream), key=lambda item: item[1]):
                position = self._positions[key]
                if key not in self._shown:
                    complete = self._running <= set(position.texts)
                    if not (complete or now - position.first_seen >= self.hold):
                        break
                    self._shown.add(key)
                if position.texts:
                    out.extend(self._lines(stream, position.texts))
                    position.texts = {}
        return out

    def flush(self) -> list[Shown]:
        """Every line not shown yet (the cell ended)."""
        self._running.clear()
        return self.ready(float("inf"))

    def _lines(self, stream: str, texts: dict[int, str]) -> list[Shown]:
        groups: dict[str, list[int]] = {}
        for rank, text in sorted(texts.items()):
            groups.setdefault(text, []).append(rank)
        ordered = sorted(groups.items(), key=lambda item: item[1][0])
        return [Shown(stream, f"[{rank_list(ranks)}] {text}") for text, ranks in ordered]
