"""In the kernel: ``%gpucluster park`` and ``resume``: the GPU workers of the cluster started here give their GPUs
back to the server while the notebook idles, their data kept, and take them again when work reaches them.

Park: the owner moves the cluster IN_USE → PARKED (refused while a start, restart or scale is under way, and while
tasks run on it); every worker process is then locked and checkpointed at once (``workers.checkpoint``: its GPU
memory goes to host memory, the GPU is released). A process the driver refuses is named with the reason and keeps
running, and those already parked are resumed: a failed park loses nothing and leaves the cluster in use. Resume:
every process restored and unlocked at once; PARKED → IN_USE. A resume that cannot get a GPU back leaves the
cluster parked and says so (work that brought it fails with that line); the next try starts again. Work that
reaches the scheduler while the cluster is parked resumes it first (``resume_on_work``, a scheduler plugin: the
resume runs off the scheduler's event loop while the graph's tasks wait), and so does a ``%%gpurun`` cell on it; a
cell that sends it nothing resumes nothing. A stop of a parked cluster resumes it first, so its workers end as usual.
The cluster's record says it is parked (the side panel, the status bar, ``/metrics``).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import time
from collections.abc import Callable, Iterable
from typing import Any

from gpu_magics.cluster.background.idle import IdleWatcher
from gpu_magics.cluster.control import kernel_cluster, owner, record_writer
from gpu_magics.cluster.control.answers import require_active
from gpu_magics.cluster.control.machine.events import (
    AdaptAsked,
    FreeAsked,
    IdleFor,
    Instruction,
    JoinResume,
    ParkAsked,
    ParkIdle,
    ResumeAsked,
    ResumeFailed,
    ResumeFirst,
    WorkersMoved,
    accepted,
)
from gpu_magics.cluster.control.machine.table import PhaseRefused, require
from gpu_magics.cluster.options import PROG
from gpu_magics.cluster.reading.running import ActiveCluster, Parked
from gpu_magics.cluster.workers import checkpoint
from gpu_magics.text.errors import ClusterError, NotOurs, shown_as_one_line
from gpu_magics.text.said import say
from gpu_magics.text.units import dropped, format_bytes, format_duration, format_seconds

PLUGIN_NAME = "gpu-magics-resume-on-work"


class TasksRunning(ClusterError):
    """A park refused: tasks run on the cluster (a park waits for none: it loses nothing)."""


def park(idle_s: float | None = None) -> str:
    """Park the GPU workers of the cluster in use; one line says what was given back and how long it took
    (``idle_s``: parked by ``IdlePark`` after that long without a task)."""
    current = require_active("park")
    targets = current.manager.park_targets()
    if not targets:
        raise NotOurs(f"{PROG} park: {current.manager.why_not_parkable}")
    try:
        require(owner.post(ParkAsked(current)))
    except PhaseRefused:
        raise ClusterError(_refused("park", current)) from None
    running = running_tasks(current)
    if running:
        owner.post(WorkersMoved(current))
        raise TasksRunning(
            f"{PROG} park: {running} task(s) run on {current.name!r} now; park it once the cell that sent them is done"
        )
    began = time.perf_counter()
    held = _gpu_bytes(targets.values())
    failed = _all_at_once(_park_one, targets)
    if failed:
        parked = {name: pid for name, pid in targets.items() if name not in failed}
        undone = _all_at_once(_resume_one, parked)
        owner.post(WorkersMoved(current))
        names = "; ".join(f"{name} (pid {targets[name]}): {why}" for name, why in failed.items())
        left = f"; {len(undone)} could not be resumed: {', '.join(sorted(undone))}" if undone else ""
        raise ClusterError(f"{PROG} park: nothing parked, the workers keep their GPUs: {names}{left}")
    took = time.perf_counter() - began
    state = Parked(dict(targets), sum(held.values()), time.time())
    owner.post(WorkersMoved(current, state))
    _record(current)
    _watch_for_work(current)
    count = len(targets)
    idle = current.manager.park_note  # simulated GPUs: says so
    if idle_s is not None:  # said at the next cell, maybe much later: when, too
        idle += f" at {time.strftime('%H:%M:%S')}, after {format_duration(idle_s)} without a task"
        idle += " (ClusterMagics.park_after)"
    return (
        f"{PROG}: parked {count} worker{'s' if count != 1 else ''} of {current.name!r}{idle}: "
        f"{format_bytes(state.released)} of GPU memory back to the server in {format_seconds(took)}; the next cell "
        f"that sends it work resumes {'them' if count != 1 else 'it'}"
    )


def resume(*, asked: bool = True) -> str | None:
    """Resume the parked workers of the cluster in use; one line with the time (``None`` where nothing was parked
    and ``asked`` is false: a cell's own resume that had nothing to do)."""
    current = kernel_cluster.in_use()
    state = None if current is None else current.parked
    if current is None or state is None:
        if not asked:
            return None
        if current is None:
            require_active("resume")
        raise ClusterError(f"{PROG} resume: {current.name!r} is not parked" if current else "nothing is parked")
    done: concurrent.futures.Future[None] = concurrent.futures.Future()
    answer = owner.post(ResumeAsked(current, done))
    joined = next((item.done for item in answer if isinstance(item, JoinResume)), None)
    if joined is not None:  # another thread resumes it: its end is this one's (its line is its own)
        joined.result()
    if joined is not None or not accepted(answer):  # (or it resumed already)
        return None
    began = time.perf_counter()
    try:
        _resume_workers(current, state)
    except BaseException as error:  # the cluster stays parked: those waiting hear why
        owner.post(ResumeFailed(current))
        done.set_exception(error)
        raise
    owner.post(WorkersMoved(current))
    done.set_result(None)
    _record(current)
    if current.idle_park is not None:  # idle from now on: parked again after as long
        current.idle_park.arm()
    count = len(state.processes)
    return (
        f"{PROG}: resumed {count} worker{'s' if count != 1 else ''} of {current.name!r}{current.manager.park_note} in "
        f"{format_seconds(time.perf_counter() - began)}"
    )


def _resume_workers(current: ActiveCluster, state: Parked) -> None:
    """Every parked process of ``current`` restored and unlocked at once; a ``ClusterError`` names those that could
    not take their GPU back."""
    failed = _all_at_once(_resume_one, state.processes)
    if failed:
        names = "; ".join(f"{name}: {why}" for name, why in failed.items())
        raise ClusterError(
            f"{PROG} resume: {len(failed)} of {len(state.processes)} worker(s) of {current.name!r} could not take "
            f"their GPU back ({names}); they stay parked, with their data: run {PROG} resume to try again"
        )


def resume_for_work() -> None:
    """Before work goes to the cluster in use: resume it where it is parked, saying so in one line."""
    said = resume(asked=False)
    if said is not None:
        say(said)


def resumed_first(answer: list[Instruction], *, said_here: bool = True) -> bool:
    """Where the machine answered ``ResumeFirst``: resume the parked cluster (its line said here, where
    ``said_here``; its failure raised, or only logged where not: a stop closes it all the same); whether it did or
    tried (the verb then posts its event again)."""
    if not any(isinstance(item, ResumeFirst) for item in answer):
        return False
    try:
        said = resume(asked=False)
    except ClusterError as error:
        if said_here:
            raise
        dropped("resuming the parked cluster before it stops", error)  # it stops all the same: its workers end
        return True
    if said is not None and said_here:
        say(said)
    return True


def asking_workers(event: AdaptAsked | FreeAsked, verb: str) -> None:
    """Post ``event`` for a verb that asks the workers (``adapt``, ``free``): a parked cluster resumes first (its
    line said here); one the machine refuses is the verb's one line."""
    answer = owner.post(event)
    if resumed_first(answer):
        answer = owner.post(event)
    if not accepted(answer):
        raise ClusterError(_refused(verb, event.cluster))


def _record(current: ActiveCluster) -> None:
    """The cluster's record says whether it is parked (the side panel's card, the status bar, ``/metrics``)."""
    if current.record is not None:
        record_writer.write_record(current, refresh=True)


def _refused(verb: str, current: ActiveCluster) -> str:
    phase = kernel_cluster.phase()
    if phase is kernel_cluster.Phase.PARKED:
        return f"{PROG} {verb}: {current.name!r} is parked already; {PROG} resume brings it back"
    return f"{PROG} {verb}: {current.name!r} is {phase.value}; wait for it, then run this again"


def _park_one(pid: int) -> None:
    driver = checkpoint.driver()
    driver.lock(pid)
    try:
        driver.checkpoint(pid)
    except checkpoint.CheckpointError:
        driver.unlock(pid)  # locked only: it goes on as it was
        raise


def _resume_one(pid: int) -> None:
    """From wherever the process got (a resume tried before may have brought some back): running again."""
    driver = checkpoint.driver()
    state = driver.state(pid)
    if state == "checkpointed":
        driver.restore(pid)
        state = "locked"
    if state == "locked":
        driver.unlock(pid)


def _all_at_once(step: Callable[[int], None], processes: dict[str, int]) -> dict[str, str]:
    """Run ``step`` on every process at once; the ones it failed for, with the reason."""
    if not processes:
        return {}
    failed: dict[str, str] = {}
    with concurrent.futures.ThreadPoolExecutor(len(processes), thread_name_prefix="gpu-magics-park") as pool:
        futures = {pool.submit(step, pid): name for name, pid in processes.items()}
        for future in concurrent.futures.as_completed(futures):
            error = future.exception()
            if isinstance(error, checkpoint.CheckpointError):
                failed[futures[future]] = str(error)
            elif error is not None:
                raise error
    return failed


def _gpu_bytes(pids: Iterable[int]) -> dict[int, int]:
    """The GPU memory each process holds now, by pid (one read of NVML's process lists)."""
    from gpu_magics.cluster.workers.kernel_context import processes_memory

    return {pid: sum(used or 0 for used in held.values()) for pid, held in processes_memory(pids).items()}


def running_tasks(current: ActiveCluster) -> int:
    """How many tasks run on the cluster's workers now (the scheduler in this process: no round trip)."""
    from gpu_magics.cluster.reading import inspection

    scheduler = inspection.local_scheduler(current.client)
    if scheduler is None:
        return 0
    return sum(len(worker.processing) for worker in scheduler.workers.values())


def _watch_for_work(current: ActiveCluster) -> None:
    """Have the cluster's scheduler resume it before it sends any work on (the scheduler runs in this process)."""
    from gpu_magics.cluster.reading import inspection

    scheduler = inspection.local_scheduler(current.client)
    if scheduler is not None and PLUGIN_NAME not in scheduler.plugins:
        scheduler.add_plugin(resume_on_work(), name=PLUGIN_NAME)


def resume_on_work() -> Any:
    """A scheduler plugin: a graph that arrives while the cluster is parked resumes it first, before its tasks go to
    any worker. The resume runs off the scheduler's event loop, so the scheduler answers every client meanwhile; the
    parked workers are paused on the scheduler until it ended (their tasks wait for them). Its line, said from the
    executor's thread, goes to the cell whose work brought it (``said.say``)."""
    from distributed.diagnostics.plugin import SchedulerPlugin

    class ResumeOnWork(SchedulerPlugin):
        name = PLUGIN_NAME

        def update_graph(
            self, scheduler: Any, client: str | None = None, keys: Iterable[Any] = (), **kwargs: Any
        ) -> None:
            del kwargs
            current = kernel_cluster.in_use()
            parked = None if current is None else current.parked
            if parked is None:
                return
            waiting = [a for a, worker in scheduler.workers.items() if str(worker.name) in parked.processes]
            _workers_status(scheduler, waiting, "paused")  # before the graph's transitions: its tasks wait
            resuming = asyncio.get_running_loop().run_in_executor(None, resume_for_work)  # off the event loop
            resuming.add_done_callback(lambda ended: _resumed(ended, scheduler, waiting, client, list(keys)))

    return ResumeOnWork()


def _resumed(
    ended: asyncio.Future[None], scheduler: Any, waiting: list[str], client: str | None, keys: list[Any]
) -> None:
    """On the scheduler's event loop, once the resume a graph brought ended: a failure fails the graph with its line
    (the next graph tries again); the paused workers then take tasks again."""
    error = ended.exception()
    if isinstance(error, ClusterError):
        if client is not None:
            _fail_graph(scheduler, client, keys, str(error))
    elif error is not None:
        dropped("resuming the parked cluster for a graph", error)
    _workers_status(scheduler, waiting, "running")


def _workers_status(scheduler: Any, addresses: list[str], status: str) -> None:
    """On the scheduler's event loop: the workers at ``addresses`` take tasks (``running``) or not (``paused``)."""
    for address in addresses:
        scheduler.handle_worker_status_change(status, address, stimulus_id=f"gpu-magics-resume-{time.time()}")


def _fail_graph(scheduler: Any, client: str, keys: list[Any], line: str) -> None:
    """The graph ``client`` just sent fails with ``line`` (a resume failed): its futures raise IPython's
    ``UsageError`` (the notebook shows its one line) and the scheduler lets its tasks go, so none waits on a parked
    worker; results already in memory (persisted data the graph asked for again) are neither failed nor let go. On
    the scheduler's event loop, right after the graph's own transitions."""
    from distributed.core import error_message

    exception = error_message(shown_as_one_line(line))["exception"]
    pending = [key for key in keys if getattr(scheduler.tasks.get(key), "state", None) != "memory"]  # data stays
    for key in pending:
        scheduler.report({"op": "task-erred", "key": key, "exception": exception, "traceback": None}, client=client)
    if pending and client in scheduler.clients:
        scheduler.client_releases_keys(pending, client, stimulus_id=f"gpu-magics-resume-failed-{time.time()}")


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
        if running_tasks(self.current):  # the scheduler's idle clock lags a graph just sent: the next idle stretch
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
