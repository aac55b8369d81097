"""Whether a GPU is free to take, and whether work that is not ours runs on it: pure judgements over readings.

``assess`` looks at the last few snapshots of the sampler (``recent``) and calls a GPU free when little of its
memory is in use and it was seldom busy; ``other_use`` tells, for one GPU, what memory processes that are not the
user's notebooks (or their clusters) hold there: by NVML's list of processes where this side can tell its own
processes in it, else as the memory in use that no process's own report explains. Numbers only: the magics and
the side panel write the words.
"""

from __future__ import annotations

import time
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Protocol

from gpu_magics.monitor.models import GpuReading, Snapshot

__all__ = ["Assessment", "FreeRule", "OtherUse", "assess", "other_use", "rank", "recent"]

GIB = 2**30
CONTEXT_GUESS = 600 * 2**20  # a CUDA context with CuPy's libraries loaded, where a process does not say its own
DRIVER_SLACK = GIB  # memory in use that no process accounts for on an idle GPU (driver, reserved), at most
MIN_OTHER_PROCESS = 64 * 2**20  # NVML lists a process with less only while it starts or ends


@dataclass(frozen=True)
class FreeRule:
    """When a GPU counts as free: at most ``memory`` of its memory in use (a share of its total, 0-1) and at most
    ``utilization`` percent busy on average over the samples looked at."""

    memory: float = 0.1
    utilization: float = 10.0


@dataclass(frozen=True)
class Assessment:
    """One device, judged over recent samples; ``None`` where a figure is unknown."""

    index: int
    uuid: str
    free: bool
    memory_used: int | None  # the most seen, less what the excluded processes hold
    memory_total: int | None
    utilization: float | None  # mean percent; None where the device does not report it (MIG instances)
    mine: int  # bytes of memory_used that this process itself holds (its pool and context)
    busy_memory: bool  # memory_used is over the rule
    busy_utilization: bool  # utilization is over the rule
    error: str | None = None  # why it could not be read (never free then)
    samples: int = 0


class _Device(Protocol):
    @property
    def index(self) -> int: ...

    @property
    def uuid(self) -> str: ...


class _Sampler(Protocol):
    @property
    def running(self) -> bool: ...

    def history(self, since: float | None = None) -> list[Snapshot]: ...

    def tick(self) -> Snapshot: ...


def recent(sampler: _Sampler, *, window: float = 5.0, samples: int = 3, spacing: float = 0.25) -> list[Snapshot]:
    """The sampler's snapshots of the last ``window`` seconds, with new ones taken ``spacing`` seconds apart
    until there are ``samples`` of them (the sampler is often not running outside a cell)."""
    found = sampler.history(since=time.time() - window) if sampler.running else []
    while len(found) < samples:
        if found:
            time.sleep(spacing)
        found.append(sampler.tick())
    return found


def assess(
    devices: Sequence[_Device],
    snapshots: Sequence[Snapshot],
    rule: FreeRule,
    *,
    exclude: Collection[int] = (),
    me: int | None = None,
) -> list[Assessment]:
    """Judge each of ``devices`` (matched to readings by UUID, else by index) over ``snapshots``. Memory that the
    processes ``exclude`` holds does not count (a cluster about to be replaced); what process ``me`` holds counts,
    and is told apart (``mine``)."""
    judged = []
    for device in devices:
        readings = [r for s in snapshots if (r := _match(s.gpus, device)) is not None]
        good = [r for r in readings if r.error is None]
        if not good or readings[-1].error is not None:  # unreadable now: whatever it was before
            error = readings[-1].error if readings else "no reading"
            judged.append(Assessment(device.index, device.uuid, False, None, None, None, 0, False, False, error))
            continue
        excluded = max(_held_by(r, exclude) for r in good)
        used_values = [r.memory_used - excluded for r in good if r.memory_used is not None]
        used = max(0, max(used_values)) if used_values else None
        total = next((r.memory_total for r in reversed(good) if r.memory_total), None)
        utils = [r.gpu_util for r in good if r.gpu_util is not None]
        util = sum(utils) / len(utils) if utils else None
        busy_memory = used is None or total is None or used > rule.memory * total
        busy_util = util is not None and util > rule.utilization
        mine = max(_held_by(r, () if me is None else (me,)) for r in good)
        free = not (busy_memory or busy_util)
        found = Assessment(device.index, device.uuid, free, used, total, util, mine, busy_memory, busy_util)
        judged.append(replace(found, samples=len(good)))
    return judged


def rank(assessed: Sequence[Assessment]) -> list[Assessment]:
    """The free devices, freest first: least busy, then least memory in use, then by index."""
    free = [a for a in assessed if a.free]
    return sorted(free, key=lambda a: (a.utilization or 0.0, (a.memory_used or 0) / (a.memory_total or 1), a.index))


def _match(readings: Sequence[GpuReading], device: _Device) -> GpuReading | None:
    if device.uuid:
        return next((r for r in readings if r.uuid == device.uuid), None)
    return next((r for r in readings if r.index == device.index), None)


def _held_by(reading: GpuReading, pids: Collection[int]) -> int:
    return sum(p.used_memory or 0 for p in reading.processes or () if p.pid in pids)


@dataclass(frozen=True)
class OtherUse:
    """Memory on a GPU that is not the user's notebooks' (nor their clusters'): ``pids`` where NVML names the
    processes (``how="nvml"``), else what no process's own report explains (``how="unexplained"``)."""

    bytes: int
    pids: tuple[int, ...] = ()
    how: str = "nvml"
    unknown: int = 0  # processes NVML lists without their memory

    def to_json(self) -> dict[str, object]:
        return {"bytes": self.bytes, "pids": list(self.pids), "how": self.how, "unknown": self.unknown}


def other_use(
    memory_used: int | None,
    memory_total: int | None,
    processes: Sequence[tuple[int, int | None]] | None,
    ours: Mapping[int, int | None],
    *,
    unknown_contexts: int = 0,
) -> OtherUse | None:
    """What others hold on one GPU, or ``None`` when nothing says so.

    ``processes``: NVML's list of (pid, bytes) on the GPU (``None`` when it cannot be read); ``ours``: pid -> the
    bytes each of our processes holds there (kernels, their children and workers; ``None`` when unknown);
    ``unknown_contexts``: how many of ours do not count their CUDA context in that figure. NVML's pids are used
    only where they are ours to compare: when one of ours that holds memory here is among them (in a container
    NVML gives the host's pids, and none would match).
    """
    listed = {pid: used for pid, used in processes or ()}
    holding = [pid for pid, held in ours.items() if held]
    comparable = processes is not None and (not holding or any(pid in listed for pid in holding))
    if comparable:
        others = {pid: used for pid, used in listed.items() if pid not in ours}
        unknown = sum(1 for used in others.values() if used is None)
        held = sum(used or 0 for used in others.values())
        if others and (held >= MIN_OTHER_PROCESS or unknown):
            return OtherUse(held, tuple(sorted(others)), "nvml", unknown)
        explained = sum(used or 0 for used in listed.values()) + sum(
            held or 0 for pid, held in ours.items() if pid not in listed
        )
    else:
        explained = sum(held or 0 for held in ours.values())
    if memory_used is None:
        return None
    slack = min(DRIVER_SLACK, 0.1 * memory_total if memory_total else DRIVER_SLACK)
    slack += CONTEXT_GUESS * unknown_contexts
    unexplained = memory_used - explained
    return OtherUse(int(unexplained), (), "unexplained") if unexplained > slack else None
