"""``%gpucluster park`` and ``ClusterMagics.park_after``: everything the notebook holds on its GPUs is given back
to the server while it idles, its data kept: the GPU workers of the cluster started here, the SPMD ranks on them, and
this kernel's own CUDA context and arrays. The next work resumes the workers and the ranks (``verbs.resume``), the
next execution the kernel (``kernel_park``).

The machine moves the cluster IN_USE → PARKED (``ParkAsked``: refused while a start, restart or scale is under
way); tasks or an SPMD cell running on it refuse the park (it waits for none). The workers and the ranks first copy
their GPU data to host memory themselves (the ranks ending their process group), then every process is parked at
once by the driver (``parking``). A process the driver refuses is named with the reason and keeps running, and
those already parked are resumed: a failed park loses nothing and leaves the cluster in use (``WorkersMoved``
without a park). The cluster's record says it is parked (the side panel, the status bar, ``/metrics``).
"""

from __future__ import annotations

import os
import threading
import time

from gpu_magics.cluster.background.idle import IdleWatcher
from gpu_magics.cluster.control import owner, parking, queries
from gpu_magics.cluster.control.answers import require_active
from gpu_magics.cluster.control.machine.events import IdleFor, ParkAsked, ParkIdle, WorkersMoved
from gpu_magics.cluster.control.machine.phase import PhaseRefused
from gpu_magics.cluster.control.machine.table import require
from gpu_magics.cluster.control.verbs import resume
from gpu_magics.cluster.options import PROG
from gpu_magics.cluster.reading.running import ActiveCluster, Parked
from gpu_magics.cluster.workers import kernel_arrays, kernel_park
from gpu_magics.cluster.workers.checkpoint import CheckpointError
from gpu_magics.text import said
from gpu_magics.text.errors import ClusterError, NotOurs, RankError
from gpu_magics.text.said import say
from gpu_magics.text.units import dropped, format_bytes, format_duration, format_seconds, one_line


class TasksRunning(ClusterError):
    """A park refused: tasks run on the cluster (a park waits for none: it loses nothing)."""


def park(idle_s: float | None = None) -> str:
    """Park the GPU workers of the cluster in use; one line says what was given back and how long it took
    (``idle_s``: parked by ``IdlePark`` after that long without a task)."""
    current = require_active("park")
    targets = current.manager.park_targets()
    if not targets:
        raise NotOurs(f"{PROG} park: {current.manager.why_not_parkable}")
    asked = ParkAsked(current)
    try:
        require(owner.post(asked))
    except PhaseRefused:
        raise ClusterError(parking.refused("park", current)) from None
    try:
        return _park(current, targets, idle_s)
    finally:
        if current.parked is None:  # whatever ended it before its workers were parked: in use again (posted
            owner.post(WorkersMoved(current))  # already where it failed, and then refused: nothing changes)
        asked.done.set_result(None)  # a resume that waited for it asks again


def _park(current: ActiveCluster, targets: dict[str, int], idle_s: float | None) -> str:
    """From PARKED on (its workers not parked yet): the park itself, its line, or its one-line refusal."""
    running = parking.running_tasks(current)
    busy = _spmd_cell_running()
    if running or busy:
        owner.post(WorkersMoved(current))
        what = f"{running} task(s) run" if running else "an SPMD cell runs"
        raise TasksRunning(f"{PROG} park: {what} on {current.name!r} now; park it once the cell that sent them is done")
    began = time.perf_counter()
    party = parking.members(current, targets, kernel_too=_kernel_may_park())
    processes = {**party.workers, **party.ranks}
    held = parking.gpu_bytes(processes.values())  # (the kernel's: read with the party)
    moved, fallback = _offload(current, party)
    copied = time.perf_counter()
    for_driver = parking.gpu_bytes_by_gpu([*processes.values(), *([os.getpid()] if party.kernel else [])])
    parking.gpu_monitors(current, False, kernel=bool(party.kernel))
    checkpointing = time.perf_counter()
    failed, kernel_refused = _park_processes(party, processes)
    checkpointed = time.perf_counter()
    if failed:
        if party.kernel and kernel_refused is None:  # back first: its own driver calls resume the others
            kernel_park.restore()
        parked = {name: pid for name, pid in processes.items() if name not in failed}
        undone = parking.all_at_once(parking.resume_one, parked)
        parking.gpu_monitors(current, True, kernel=True)
        parking.reload_members(current, party)  # the data back on the GPUs, where the processes run again
        owner.post(WorkersMoved(current))
        names = "; ".join(f"{name} (pid {processes[name]}): {why}" for name, why in failed.items())
        left = f"; {len(undone)} could not be resumed: {', '.join(sorted(undone))}" if undone else ""
        raise ClusterError(f"{PROG} park: nothing parked, every process keeps its GPU memory: {names}{left}")
    kernel_copied = bool(party.kernel) and kernel_arrays.installed()
    kernel_kept = ""
    if kernel_refused is not None:
        kernel_kept = f"; this kernel keeps its own {format_bytes(sum(party.kernel.values()))} ({kernel_refused})"
        party.kernel = {}
    took = time.perf_counter() - began
    parking.last_figures["park"] = {
        "copies": round(copied - began, 3),
        "driver": round(took - (copied - began), 3),
        "driver: every process at once": round(checkpointed - checkpointing, 3),
    }
    parking.last_figures["park copies"] = moved.steps
    parking.last_figures["left for the driver (MiB)"] = {
        str(pid): sum(held.values()) >> 20 for pid, held in for_driver.items()
    }
    released = sum(held.get(pid, 0) for pid in processes.values()) + sum(party.kernel.values())
    comes_back: dict[str, int] = {}  # what the driver must restore on each GPU (the kernel's helper checks its own)
    for pid in processes.values():
        for uuid, used in for_driver.get(pid, {}).items():
            comes_back[uuid] = comes_back.get(uuid, 0) + used
    state = Parked(dict(targets), released, time.time(), dict(party.ranks), comes_back)
    owner.post(WorkersMoved(current, state))
    parking.record(current)
    resume.watch_for_work(current)
    idle = current.manager.park_note  # simulated GPUs: says so
    if idle_s is not None:  # said at the next cell, maybe much later: when, too
        idle += f" at {time.strftime('%H:%M:%S')}, after {format_duration(idle_s)} without a task"
        idle += " (ClusterMagics.park_after)"
    many = len(targets) + len(party.ranks) != 1
    later = "; this kernel's comes back at the next cell" if party.kernel else kernel_kept
    copiers = _and(["the workers"] + ["the ranks"] * bool(party.ranks) + ["this kernel"] * kernel_copied)
    return (
        f"{PROG}: parked {party.words()} of {current.name!r}{idle}: {format_bytes(state.released)} of GPU memory back "
        f"to the server in {format_seconds(took)}{moved.words(f'of it copied to host memory by {copiers}')}"
        f"{fallback}; the next cell that sends it work resumes {'them' if many else 'it'}{later}"
    )


def _and(names: list[str]) -> str:
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


def _park_processes(party: parking.Members, processes: dict[str, int]) -> tuple[dict[str, str], str | None]:
    """The driver's park of every process at once: the workers and the ranks, and this kernel with them where it
    holds GPU memory (its helper then parks them all: a parked kernel's own driver calls would wait). The reasons of
    those refused, by name, and this kernel's own (``None``: parked, or not asked)."""
    if not party.kernel:
        return parking.all_at_once(parking.park_one, processes), None
    try:
        return kernel_park.park_together(party.kernel, processes)
    except CheckpointError as error:  # the helper itself failed: nothing parked (each process runs on)
        return {name: str(error) for name in processes}, str(error)


def _spmd_cell_running() -> bool:
    found = queries.rank_park()
    return found is not None and bool(found.busy)


def _kernel_may_park() -> bool:
    """Whether this kernel's own context may be parked now: from the thread that runs cells, or between cells (a
    cell that runs meanwhile would wait at its next CUDA call for a resume that only the next execution brings)."""
    return threading.current_thread() is threading.main_thread() or not said.cell_running()


def _offload(current: ActiveCluster, party: parking.Members) -> tuple[parking.Moved, str]:
    """The workers' and the ranks' data to host memory, where it has room (else the park is refused, the phase
    undone); a fast path that fails leaves the driver to move everything, said in the line: (what moved, the words
    that say so)."""
    try:
        refused = parking.host_refusal(current, party)
    except (OSError, RuntimeError, TimeoutError, RankError) as error:  # one silent or gone: the driver moves it all
        return parking.Moved(), f" (the driver moved it all: not every process answered, {one_line(error)})"
    if refused is not None:
        owner.post(WorkersMoved(current))
        raise ClusterError(refused)
    try:
        return parking.offload_members(current, party), ""
    except (*parking.COPY_FAILURES, RankError) as error:  # a copy failing (CUDA, host memory): what moved comes back
        dropped("copying the GPU data to host memory", error)
        try:
            parking.reload_members(current, party)
        except (*parking.COPY_FAILURES, RankError) as again:
            dropped("copying back what a failed park had moved", again)
        return parking.Moved(), f" (the driver moved it all: the processes' own copies failed, {one_line(error)})"


class IdlePark:
    """Parks ``current`` after ``after_s`` seconds without a task (``%config ClusterMagics.park_after``), and again
    each time it idles that long after a resume (which arms it again). Its line, said from the watch's thread, goes
    to the cell running then, else once to the top of the next cell (``said.say``)."""

    def __init__(self, current: ActiveCluster, after_s: float) -> None:
        self.current, self.after_s = current, after_s
        self._watcher: IdleWatcher | None = None

    def arm(self) -> None:
        """Watch from now on (a watch under way is replaced)."""
        self.stop()
        self._watcher = IdleWatcher(self.current.client, self.after_s, self._idle)

    def left(self) -> float | None:
        """Seconds until it parks the cluster if it stays idle (``None``: a task runs, or it watches no more)."""
        watcher = self._watcher
        return None if watcher is None else watcher.left()

    def stop(self) -> None:
        if self._watcher is not None:
            self._watcher.stop()
            self._watcher = None

    def again(self) -> None:
        """Watch again from now on, unless stopped meanwhile (the start or change this watch waited for ended)."""
        if self._watcher is not None:
            self.arm()

    def _idle(self) -> None:
        """The watcher's end (on its thread): park, where the cluster is still in use and nothing is under way. A
        start or change still under way (the scheduler can be idle while workers come) keeps it waiting: once that
        ended, the scheduler is asked again from a new watch (``again``)."""
        if not any(isinstance(item, ParkIdle) for item in owner.post(IdleFor(self.current, self))):
            return
        if parking.running_tasks(self.current):  # the scheduler's idle clock lags a graph just sent: the next stretch
            self.arm()
            return
        try:
            say(park(idle_s=self.after_s))
        except TasksRunning:  # tasks came meanwhile: nothing to say, watch for the next idle stretch
            self.arm()
        except ClusterError as error:  # what cannot be parked is said once; the cluster goes on as it was
            say(str(error))


def watch_idle(current: ActiveCluster, after_s: float) -> IdlePark | None:
    """An armed ``IdlePark`` for ``current`` (``None`` where ``after_s`` is 0); a cluster whose workers cannot be
    parked says so once, when it first idles that long."""
    if after_s <= 0:
        return None
    idle_park = IdlePark(current, after_s)
    idle_park.arm()
    return idle_park
