"""Merging the ranks' output lines into what the cell shows: lines in the order they were printed across ranks
(by the time each rank's host read them), a line that several ranks printed alike once with their ranks
(``[0-3] epoch 1 loss 0.52``), a line that differs with its own rank.

A rank's n-th printing of a text joins the other ranks' n-th printing of the same text (unless two ranks printed
two texts the other way round). A line shows once every
running rank has printed it or gone past it (printed a line no earlier than it), or once it has waited ``hold``
seconds (a line only some ranks print, or a slow rank's, then shows with the ranks that had it), or when the cell
ends; a line waits for every line printed before it, so the order across ranks holds, and a merged line for
its ranks' own earlier lines, so each rank's order holds too. Known framework noise
(gloo's connection lines) is left out of the cell and handed back to be logged. Pure: lines and clocks in, text out.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

HOLD_S = 0.3
NOISE = (
    # torch's and JAX's gloo, at every group it makes
    re.compile(r"^\[Gloo\] Rank \d+ is connected to \d+ peer ranks\. Expected number of connected peer ranks is : \d+"),
)


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


def is_noise(text: str) -> bool:
    """Whether ``text`` is a framework's line that says nothing to the reader (kept in the log instead)."""
    return any(pattern.match(text.strip()) for pattern in NOISE)


@dataclass
class _Group:
    """One text as printed by some ranks (each for the same n-th time)."""

    key: tuple[str, str, int]  # (stream, text, n)
    printed: float  # the earliest of its lines, by the hosts' clocks
    arrived: float  # when its first line reached the kernel
    ranks: list[int] = field(default_factory=list)
    after: list[_Group] = field(default_factory=list)  # its ranks' earlier lines not shown yet: it shows after them
    before: list[_Group] = field(default_factory=list)  # the lines its ranks printed next
    released: bool = False


def _may_follow(group: _Group, previous: _Group | None, limit: int = 256) -> bool:
    """Whether a rank whose last line is in ``previous`` may join ``group``: not where ``previous`` must show
    after ``group`` already (another rank printed them the other way round). A search too long says no."""
    if previous is None or previous.released:
        return True
    seen: set[int] = set()
    todo = [group]
    while todo:
        current = todo.pop()
        if current is previous:
            return False
        if id(current) in seen:
            continue
        seen.add(id(current))
        if len(seen) > limit:
            return False
        todo.extend(later for later in current.before if not later.released)
    return True


@dataclass(frozen=True)
class Shown:
    stream: str  # "out" or "err"
    text: str  # the line with its ranks in front


class LineMerger:
    """The lines of one cell from ``ranks``, merged as they arrive."""

    def __init__(self, ranks: Sequence[int], hold: float = HOLD_S, shown: Sequence[int] | None = None) -> None:
        self.ranks = tuple(ranks)
        self.hold = hold
        self.shown = None if shown is None else set(shown)  # --output: lines of only these ranks show live
        self.noise: list[tuple[int, str]] = []  # (rank, line) left out, for the log
        self.folded: list[Shown] = []  # the other ranks' lines, in order, kept for a block to open
        self._running = set(ranks)
        self._seen: dict[int, set[int]] = {rank: set() for rank in ranks}  # rank -> sequence numbers taken
        self._counts: dict[tuple[int, str, str], int] = {}  # (rank, stream, text) -> times printed so far
        self._last: dict[int, float] = {}  # rank -> when its last line was printed
        self._previous: dict[int, _Group] = {}  # rank -> the group of its last line
        self._open: dict[tuple[str, str, int], _Group] = {}
        self._pending: list[_Group] = []

    def add(self, rank: int, lines: Iterable[Sequence[Any]], now: float) -> None:
        """Lines ``(seq, stream, text, printed)`` from ``rank`` (a line seen before, by its seq, is ignored)."""
        taken = self._seen.setdefault(rank, set())
        for seq, stream, text, *rest in sorted(lines, key=lambda item: int(item[0])):
            printed = float(rest[0]) if rest else now
            if seq in taken:
                continue
            taken.add(seq)
            if is_noise(text):
                self.noise.append((rank, text))
                continue
            count = self._counts.get((rank, stream, text), 0)
            self._counts[(rank, stream, text)] = count + 1
            self._last[rank] = max(self._last.get(rank, printed), printed)
            previous = self._previous.get(rank)
            key = (stream, text, count)
            group = self._open.get(key)
            if group is None or not _may_follow(group, previous):
                group = self._open[key] = _Group(key, printed, now)
                self._pending.append(group)
            group.ranks.append(rank)
            group.printed = min(group.printed, printed)
            if previous is not None and not previous.released:  # this rank's lines keep their order
                group.after.append(previous)
                previous.before.append(group)
            self._previous[rank] = group

    def finished(self, rank: int) -> None:
        """``rank`` prints nothing more in this cell."""
        self._running.discard(rank)

    def ready(self, now: float) -> list[Shown]:
        """The lines to show now, in the order they were printed: a line waits for the lines printed before it,
        and a merged line for each of its ranks' own earlier lines."""
        self._pending.sort(key=lambda group: (group.printed, min(group.ranks)))
        out: list[Shown] = []
        progress = True
        while progress:
            progress = False
            for group in self._pending:
                if group.released:
                    continue
                if not (self._complete(group) or now - group.arrived >= self.hold):
                    break
                if any(not earlier.released for earlier in group.after):
                    continue
                group.released = progress = True
                if self._open.get(group.key) is group:
                    del self._open[group.key]
                line = Shown(group.key[0], f"[{rank_list(group.ranks)}] {group.key[1]}")
                (out if self.shown is None or self.shown.intersection(group.ranks) else self.folded).append(line)
        self._pending = [group for group in self._pending if not group.released]
        return out

    def _complete(self, group: _Group) -> bool:
        """Whether no running rank will join ``group``: each is in it, printed this text's n-th time already, or
        has printed a line no earlier than it (it went on past it)."""
        stream, text, n = group.key
        for rank in self._running.difference(group.ranks):
            if self._counts.get((rank, stream, text), 0) > n:  # its n-th of this text showed already, alone
                continue
            if self._last.get(rank, float("-inf")) < group.printed:
                return False
        return True

    def flush(self) -> list[Shown]:
        """Every line not shown yet (the cell ended)."""
        self._running.clear()
        return self.ready(float("inf"))


def progress_lines(progress: dict[int, dict[str, str]], finished: dict[int, list[str]] | None = None) -> list[str]:
    """The progress bars, one line per rank with its label, alike ones merged: ``[0-3]  45%|####5 | 45/100``. A
    rank's finished bars (``finished``, in order) keep their place above its live one, as in a terminal: the
    n-th bar of every rank in the n-th group of lines."""
    entries: dict[tuple[int, str], list[int]] = {}
    for rank in sorted(set(progress) | set(finished or {})):
        bars = list((finished or {}).get(rank, ()))
        bars += [text for stream in ("out", "err") if (text := progress.get(rank, {}).get(stream))]
        for position, text in enumerate(bars):
            entries.setdefault((position, text), []).append(rank)
    ordered = sorted(entries.items(), key=lambda item: (item[0][0], item[1][0]))
    return [f"[{rank_list(ranks)}] {text}" for (_, text), ranks in ordered]
