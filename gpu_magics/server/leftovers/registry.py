"""The processes each kernel started, as recorded while it ran; which of them outlived it and hold GPU memory; and
ending those, only where a pid still names the process recorded (its start time) and it is this user's."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

from gpu_magics.monitor.models import Snapshot
from gpu_magics.text.units import format_bytes

MAX_RECORDED = 20_000  # processes remembered at most (the oldest of ended kernels go first)
START_TOLERANCE = 0.05  # seconds: psutil's start times of one process agree to ~0.01 s
END_WAIT = 5.0  # seconds a process has to stop after SIGTERM before SIGKILL


@dataclass(frozen=True)
class Started:
    """A process a kernel started, as recorded while the kernel ran."""

    pid: int
    started: float  # its start time (seconds since the epoch), as psutil reads it
    name: str
    kernel_id: str
    kernel_pid: int
    kernel_started: float


@dataclass(frozen=True)
class Leftover:
    """A process on one of the server's GPUs whose kernel has ended."""

    pid: int
    started: float
    name: str
    kernel_id: str
    gpu: int
    gpu_uuid: str
    gpu_label: str
    used_memory: int | None  # bytes, NVML's figure (None where NVML cannot tell)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Ended:
    """What ``end`` did to one process asked for."""

    pid: int
    ended: bool
    reason: str | None = None  # why it was left alone

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def process_table() -> dict[int, tuple[int, float, str]]:
    """pid -> (parent pid, start time, name) of every running process (zombies left out): each ``/proc/PID/stat``
    read once, start times as psutil computes them; through psutil where there is no ``/proc``."""
    import psutil

    if not os.path.isdir("/proc/self"):
        table = {}
        for process in psutil.process_iter(["ppid", "create_time", "name", "status"]):
            info = process.info
            if info["status"] != psutil.STATUS_ZOMBIE and info["create_time"] is not None:
                table[process.pid] = (int(info["ppid"] or 0), float(info["create_time"]), str(info["name"] or ""))
        return table
    boot, ticks = psutil.boot_time(), os.sysconf("SC_CLK_TCK")
    found = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as file:
                stat = file.read()
        except OSError:  # ended while we looked
            continue
        name, rest = stat[stat.index(b"(") + 1 : stat.rindex(b")")], stat[stat.rindex(b")") + 2 :].split()
        if rest[0] == b"Z":
            continue
        found[int(entry.name)] = (int(rest[1]), boot + int(rest[19]) / ticks, name.decode(errors="replace"))
    return found


def _process(pid: int, started: float) -> Any:
    """The psutil process at ``pid`` if it is the one that started at ``started`` and still runs, else ``None``."""
    import psutil

    try:
        process = psutil.Process(pid)
        if abs(process.create_time() - started) > START_TOLERANCE or process.status() == psutil.STATUS_ZOMBIE:
            return None
        return process
    except psutil.Error:
        return None


class KernelProcesses:
    """Every process the server's kernels started (their descendants), by ``(pid, start time)``. Thread-safe."""

    def __init__(self) -> None:
        self._started: dict[tuple[int, float], Started] = {}
        self._lock = threading.Lock()

    def observe(self, kernels: Mapping[int, str]) -> None:
        """Record the descendants of each running kernel (kernel pid -> kernel id); forget recorded processes that
        have ended. One pass over ``/proc`` (each process's ``stat``): call off the event loop."""
        table = process_table()
        children: dict[int, list[int]] = {}
        for pid, (parent, _, _) in table.items():
            children.setdefault(parent, []).append(pid)
        found: dict[tuple[int, float], Started] = {}
        for kernel_pid, kernel_id in kernels.items():
            if kernel_pid not in table:
                continue
            kernel_started = table[kernel_pid][1]
            stack = list(children.get(kernel_pid, ()))
            while stack and len(found) < MAX_RECORDED:
                pid = stack.pop()
                _, started, name = table[pid]
                found[(pid, started)] = Started(pid, started, name, kernel_id, kernel_pid, kernel_started)
                stack.extend(children.get(pid, ()))
        with self._lock:
            kept = {
                key: entry
                for key, entry in self._started.items()
                if key[0] in table and abs(table[key[0]][1] - key[1]) <= START_TOLERANCE
            }
            kept.update(found)
            if len(kept) > MAX_RECORDED:
                kept = dict(sorted(kept.items(), key=lambda item: item[1].started)[-MAX_RECORDED:])
            self._started = kept

    def add(self, entries: list[Started]) -> None:
        """Take over what another registry recorded (a server before this one)."""
        with self._lock:
            for entry in entries:
                self._started.setdefault((entry.pid, entry.started), entry)

    def recorded(self) -> list[Started]:
        with self._lock:
            return list(self._started.values())

    def leftovers(self, snapshot: Snapshot | None) -> list[Leftover]:
        """Recorded processes whose kernel has ended, that still run and hold memory on a GPU of ``snapshot``
        (NVML's process lists). Reads ``/proc``: call off the event loop."""
        if snapshot is None:
            return []
        on_gpus: dict[int, list[tuple[Any, int | None]]] = {}
        for reading in snapshot.gpus:
            for process in reading.processes or ():
                on_gpus.setdefault(process.pid, []).append((reading, process.used_memory))
        found = []
        for entry in self.recorded():
            if entry.pid not in on_gpus or _process(entry.kernel_pid, entry.kernel_started) is not None:
                continue
            if _process(entry.pid, entry.started) is None:
                continue
            for reading, used in on_gpus[entry.pid]:
                found.append(Leftover(entry.pid, entry.started, entry.name, entry.kernel_id, reading.index,
                                      reading.uuid, reading.label, used))  # fmt: skip
        return sorted(found, key=lambda leftover: (leftover.gpu, leftover.pid))

    def end(self, asked: Iterable[tuple[int, float]], current: Iterable[Leftover]) -> list[Ended]:
        """End the processes ``asked`` for (pid, start time as listed), each only where it is one of ``current``
        (leftovers now), its pid still names the process recorded, and it is this user's: SIGTERM, then SIGKILL
        after ``END_WAIT`` seconds. Blocks: call off the event loop."""
        listed = [(leftover.pid, leftover.started) for leftover in current]
        recorded = self.recorded()
        results: list[Ended] = []
        targets: list[Any] = []
        for pid, started in asked:
            entry = next((e for e in recorded if e.pid == pid and abs(e.started - started) <= START_TOLERANCE), None)
            if entry is None or not any(p == pid and abs(s - started) <= START_TOLERANCE for p, s in listed):
                results.append(Ended(pid, False, f"pid {pid} is not a process left by a kernel that has ended"))
                continue
            if any(target.pid == pid for target in targets):
                continue
            process = _process(pid, entry.started)
            if process is None:
                results.append(Ended(pid, False, f"pid {pid} is no longer the process its kernel started"))
                continue
            if not _mine(process):
                results.append(Ended(pid, False, f"pid {pid} belongs to another user"))
                continue
            targets.append(process)
        results.extend(_terminate(targets))
        return results


def _mine(process: Any) -> bool:
    import psutil

    try:
        return bool(process.uids().real == os.getuid())
    except psutil.Error:
        return False


def _terminate(processes: list[Any]) -> list[Ended]:
    """SIGTERM each (through its psutil handle, which checks the pid still names it), SIGKILL what is left after
    ``END_WAIT`` seconds; an unreaped zombie counts as ended."""
    import psutil

    for process in processes:
        with contextlib.suppress(psutil.Error):
            process.send_signal(signal.SIGTERM)
    alive = _wait(processes)
    for process in alive:
        with contextlib.suppress(psutil.Error):
            process.send_signal(signal.SIGKILL)
    stuck = {process.pid for process in _wait(alive)}
    return [
        Ended(process.pid, process.pid not in stuck, "it did not stop" if process.pid in stuck else None)
        for process in processes
    ]


def _wait(processes: list[Any]) -> list[Any]:
    """Those of ``processes`` still running after at most ``END_WAIT`` seconds."""
    import psutil

    def running(process: Any) -> bool:
        try:
            return bool(process.is_running() and process.status() != psutil.STATUS_ZOMBIE)
        except psutil.Error:
            return False

    deadline = time.monotonic() + END_WAIT
    alive = [process for process in processes if running(process)]
    while alive and time.monotonic() < deadline:
        time.sleep(0.05)
        alive = [process for process in alive if running(process)]
    return alive


def summary(leftovers: Iterable[Leftover]) -> list[str]:
    """One line per GPU: ``left by a kernel that has ended: 3 processes hold 11.0 GiB on GPU 1``."""
    by_gpu: dict[str, list[Leftover]] = {}
    for leftover in leftovers:
        by_gpu.setdefault(leftover.gpu_label, []).append(leftover)
    lines = []
    for label, found in by_gpu.items():
        count = len({leftover.pid for leftover in found})
        held = sum(leftover.used_memory or 0 for leftover in found)
        processes = "1 process holds" if count == 1 else f"{count} processes hold"
        lines.append(f"left by a kernel that has ended: {processes} {format_bytes(held)} on {label}")
    return lines
