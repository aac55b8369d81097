"""Where a cell's wall time went: each worker's time split into computing, fetching inputs from other workers,
waiting while the scheduler hands out tasks, and waiting on the client (building and sending the graph before,
taking the result after).

Pure: the timelines come in as plain data (``TaskTiming``) from the scheduler plugin (``task_count``) or from
the threaded scheduler's callback (``LocalTimeline``), in one clock.

Each worker's share of the wall time is classified, so the parts add up to 100%:

- ``compute``: a task of the cell runs on the worker (on a GPU backend a task waits on its GPU work).
- ``transfers``: the worker fetches a task's inputs from another worker and runs nothing.
- ``scheduling``: the graph is on the scheduler, yet the worker runs and fetches nothing (per-task overhead,
  waiting for dependencies, too few tasks for every worker).
- ``client``: no graph of the cell was being worked on yet: the client builds, optimizes and sends it.
- ``result``: the last task ended; the client takes the result back and the GPUs are synchronized.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpu_magics.text.units import format_bytes, format_seconds

Interval = tuple[float, float]
PARTS: tuple[str, ...] = ("compute", "transfers", "scheduling", "client", "result")


@dataclass(frozen=True)
class TaskTiming:
    """One finished task: where it ran, when it computed, and when it waited for inputs from other workers."""

    worker: str
    start: float
    stop: float
    prefix: str = ""
    transfers: tuple[Interval, ...] = ()


@dataclass(frozen=True)
class TimeSplit:
    """A cell's wall time split per worker; ``seconds`` holds worker-seconds per part (they add up to
    ``wall * workers``)."""

    wall: float
    workers: int
    tasks: int
    seconds: dict[str, float]
    transfer_bytes: int = 0
    mean_task_s: float = 0.0
    prefixes: dict[str, int] = field(default_factory=dict)
    gpu: bool = True
    worker_compute: dict[str, float] = field(default_factory=dict)  # worker -> its seconds computing

    def busiest(self) -> tuple[str, float] | None:
        """The worker that computed longest and its share of all workers' computing (``None``: one worker, or
        nothing computed)."""
        total_compute = sum(self.worker_compute.values())
        if self.workers < 2 or total_compute <= 0 or not self.worker_compute:
            return None
        name = max(self.worker_compute, key=lambda worker: self.worker_compute[worker])
        return name, self.worker_compute[name] / total_compute

    def share(self, part: str) -> float:
        """The part's share of the workers' time, 0..1."""
        capacity = self.wall * self.workers
        return self.seconds.get(part, 0.0) / capacity if capacity > 0 else 0.0

    @property
    def overhead_per_task_s(self) -> float:
        """Seconds of worker time per task spent neither computing nor fetching, while the graph was in flight."""
        return self.seconds.get("scheduling", 0.0) / self.tasks if self.tasks else 0.0

    def line(self) -> str:
        """``'time: GPU busy 46% · scheduling 38% · transfers 3% (1.2 GB) · client 11% · result 2%'``."""
        label = {"compute": "GPU busy" if self.gpu else "busy"}
        parts = []
        for part in PARTS:
            share = self.share(part)
            if part == "transfers" and share < 0.005 and not self.transfer_bytes:
                continue
            text = f"{label.get(part, part)} {share * 100:.0f}%"
            if part == "transfers" and self.transfer_bytes:
                text += f" ({format_bytes(self.transfer_bytes)})"
            parts.append(text)
        per_task = f"{self.tasks:,} tasks, {format_seconds(self.mean_task_s)} of work each"
        if self.tasks:
            per_task += f", {format_seconds(self.overhead_per_task_s)} waiting per task"
        return "time: " + " · ".join(parts) + f" ({per_task})"

    def to_json(self) -> dict[str, Any]:
        return {
            "wall_s": self.wall,
            "workers": self.workers,
            "tasks": self.tasks,
            "worker_seconds": dict(self.seconds),
            "shares": {part: self.share(part) for part in PARTS},
            "transfer_bytes": self.transfer_bytes,
            "mean_task_s": self.mean_task_s,
            "overhead_per_task_s": self.overhead_per_task_s,
            "prefixes": dict(self.prefixes),
        }


def merge(intervals: Iterable[Interval]) -> list[Interval]:
    """The union of ``intervals`` as sorted, disjoint intervals."""
    merged: list[Interval] = []
    for start, stop in sorted(intervals):
        if stop <= start:
            continue
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], stop))
        else:
            merged.append((start, stop))
    return merged


def total(intervals: Iterable[Interval]) -> float:
    return sum(stop - start for start, stop in intervals)


def clip(intervals: Iterable[Interval], window: Interval) -> list[Interval]:
    low, high = window
    return [(max(start, low), min(stop, high)) for start, stop in intervals if stop > low and start < high]


def subtract(intervals: Sequence[Interval], removed: Sequence[Interval]) -> list[Interval]:
    """``intervals`` less ``removed`` (both merged)."""
    result: list[Interval] = []
    for start, stop in intervals:
        cursor = start
        for cut_start, cut_stop in removed:
            if cut_stop <= cursor or cut_start >= stop:
                continue
            if cut_start > cursor:
                result.append((cursor, cut_start))
            cursor = max(cursor, cut_stop)
        if cursor < stop:
            result.append((cursor, stop))
    return result


def active_windows(tasks: Sequence[TaskTiming], arrivals: Sequence[float]) -> list[Interval]:
    """When the cell's graphs were being worked on: from each graph's arrival (or its first task, without
    arrival times) to the end of the last task that started before the next graph arrived."""
    if not tasks:
        return []
    marks = sorted(arrivals) or [min(task.start for task in tasks)]
    bounds = [*marks[1:], float("inf")]
    windows = []
    for position, (arrival, following) in enumerate(zip(marks, bounds, strict=True)):
        low = -float("inf") if position == 0 else arrival
        mine = [task for task in tasks if low <= task.start < following]
        if mine:
            windows.append((min(arrival, *(task.start for task in mine)), max(task.stop for task in mine)))
    return merge(windows)


def fit_workers(tasks: Sequence[TaskTiming], window: Interval) -> list[TaskTiming]:
    """``tasks`` with each worker's times shifted, where needed, so that they lie inside ``window``.

    A worker reports its times in the scheduler's clock through its own estimate of the difference
    (distributed's ``scheduler_delay``), which a worker busy at start (creating its CUDA context) can get wrong
    by seconds; its tasks cannot have run before the graph arrived nor after the cell ended.
    """
    low, high = window
    fitted: list[TaskTiming] = []
    for worker in sorted({task.worker for task in tasks}):
        mine = [task for task in tasks if task.worker == worker]
        first = min(task.start for task in mine)
        last = max(task.stop for task in mine)
        shift = low - first if first < low else (high - last if last > high else 0.0)
        if shift and last - first > high - low:
            shift = low - first  # longer than the window: keep the start, clip the end
        fitted += [
            TaskTiming(
                task.worker,
                task.start + shift,
                task.stop + shift,
                task.prefix,
                tuple((a + shift, b + shift) for a, b in task.transfers),
            )
            for task in mine
        ]
    return fitted


def split(
    began: float,
    ended: float,
    tasks: Sequence[TaskTiming],
    *,
    workers: int | None = None,
    arrivals: Sequence[float] = (),
    transfer_bytes: int = 0,
    gpu: bool = True,
) -> TimeSplit:
    """Split the wall time ``ended - began`` of a cell whose tasks are ``tasks`` (one clock for all).

    ``workers``: how many workers (or devices) could run tasks (default: those that ran one); ``arrivals``:
    when each of the cell's graphs reached the scheduler.
    """
    window = (began, ended)
    names = sorted({task.worker for task in tasks})
    count = max(workers or 0, len(names), 1)
    active = clip(active_windows(tasks, arrivals), window)
    seconds = dict.fromkeys(PARTS, 0.0)
    per_worker: dict[str, float] = {}
    for name in [*names, *[None] * (count - len(names))]:
        mine = [task for task in tasks if task.worker == name]
        computing = merge(clip(((task.start, task.stop) for task in mine), window))
        fetching = subtract(merge(clip((span for task in mine for span in task.transfers), window)), computing)
        waiting = subtract(subtract([window], computing), fetching)
        seconds["compute"] += total(computing)
        if name is not None:
            per_worker[name] = total(computing)
        seconds["transfers"] += total(fetching)
        in_flight = total(clip_all(waiting, active))
        after = total(clip(waiting, (active[-1][1], ended))) if active else 0.0
        seconds["scheduling"] += in_flight
        seconds["result"] += after
        seconds["client"] += total(waiting) - in_flight - after
    prefixes: dict[str, int] = {}
    for task in tasks:
        prefixes[task.prefix] = prefixes.get(task.prefix, 0) + 1
    durations = [task.stop - task.start for task in tasks]
    return TimeSplit(
        wall=max(ended - began, 0.0),
        workers=count,
        tasks=len(tasks),
        seconds=seconds,
        transfer_bytes=transfer_bytes,
        mean_task_s=sum(durations) / len(durations) if durations else 0.0,
        prefixes=prefixes,
        gpu=gpu,
        worker_compute=per_worker,
    )


def clip_all(intervals: Sequence[Interval], windows: Sequence[Interval]) -> list[Interval]:
    """The parts of ``intervals`` inside any of ``windows``."""
    return [piece for window in windows for piece in clip(intervals, window)]
