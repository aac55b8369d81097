"""``%gpucluster park`` and ``ClusterMagics.park_after``: the GPU workers of the cluster started here give their
GPUs back to the server while the notebook idles, their data kept; the next work resumes them (``verbs.resume``).

The machine moves the cluster IN_USE → PARKED (``ParkAsked``: refused while a start, restart or scale is under
way); tasks running on it refuse the park (it waits for none). Every worker process is then parked at once
(``parking``). A process the driver refuses is named with the reason and keeps running, and those already parked
are resumed: a failed park loses nothing and leaves the cluster in use (``WorkersMoved`` without a park). The
cluster's record says it is parked (the side panel, the status bar, ``/metrics``).
"""

from __future__ import annotations

import time

from gpu_magics.cluster.background.idle import IdleWatcher
from gpu_magics.cluster.control import owner, parking
from gpu_magics.cluster.control.answers import require_active
from gpu_magics.cluster.control.machine.events import IdleFor, ParkAsked, ParkIdle, WorkersMoved
from gpu_magics.cluster.control.machine.phase import PhaseRefused
from gpu_magics.cluster.control.machine.table import require
from gpu_magics.cluster.control.verbs import resume
from gpu_magics.cluster.options import PROG
from gpu_magics.cluster.reading.running import ActiveCluster, Parked
from gpu_magics.text.errors import ClusterError, NotOurs
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
    if running:
        owner.post(WorkersMoved(current))
        raise TasksRunning(
            f"{PROG} park: {running} task(s) run on {current.name!r} now; park it once the cell that sent them is done"
        )
    began = time.perf_counter()
    held = parking.gpu_bytes(targets.values())
    moved, fallback = _offload(current)
    copied = time.perf_counter()
    failed = parking.all_at_once(parking.park_one, targets)
    if failed:
        parked = {name: pid for name, pid in targets.items() if name not in failed}
        undone = parking.all_at_once(parking.resume_one, parked)
        parking.reload_all(current)  # the arrays back on their GPUs, where the workers run again
        owner.post(WorkersMoved(current))
        names = "; ".join(f"{name} (pid {targets[name]}): {why}" for name, why in failed.items())
        left = f"; {len(undone)} could not be resumed: {', '.join(sorted(undone))}" if undone else ""
        raise ClusterError(f"{PROG} park: nothing parked, the workers keep their GPUs: {names}{left}")
    took = time.perf_counter() - began
    parking.last_figures["park"] = {"copies": round(copied - began, 3), "driver": round(took - (copied - began), 3)}
    parking.last_figures["park copies"] = moved.steps
    state = Parked(dict(targets), sum(held.values()), time.time())
    owner.post(WorkersMoved(current, state))
    parking.record(current)
    resume.watch_for_work(current)
    count = len(targets)
    idle = current.manager.park_note  # simulated GPUs: says so
    if idle_s is not None:  # said at the next cell, maybe much later: when, too
        idle += f" at {time.strftime('%H:%M:%S')}, after {format_duration(idle_s)} without a task"
        idle += " (ClusterMagics.park_after)"
    return (
        f"{PROG}: parked {count} worker{'s' if count != 1 else ''} of {current.name!r}{idle}: "
        f"{format_bytes(state.released)} of GPU memory back to the server in {format_seconds(took)}"
        f"{moved.words('of it copied to host memory by the workers')}{fallback}; the next cell that sends it work "
        f"resumes {'them' if count != 1 else 'it'}"
    )


def _offload(current: ActiveCluster) -> tuple[parking.Moved, str]:
    """The workers' arrays to host memory, where it has room (else the park is refused, the phase undone); a fast
    path that fails leaves the driver to move everything, said in the line: (what moved, the words that say so)."""
    try:
        refused = parking.host_refusal(current)
    except (OSError, RuntimeError, TimeoutError) as error:  # a worker silent or gone: the driver moves it all
        return parking.Moved(), f" (the driver moved it all: the workers did not answer, {one_line(error)})"
    if refused is not None:
        owner.post(WorkersMoved(current))
        raise ClusterError(refused)
    try:
        return parking.offload_all(current), ""
    except parking.COPY_FAILURES as error:  # a worker's failure (CUDA, host memory): what it copied comes back
        dropped("copying the workers' arrays to host memory", error)
        parking.reload_all(current)
        return parking.Moved(), f" (the driver moved it all: the workers' copies failed, {one_line(error)})"


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
