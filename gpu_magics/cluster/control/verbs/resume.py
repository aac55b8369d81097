"""``%gpucluster resume``, and the resume that work brings: every parked process of the cluster in use restored
and unlocked at once (``parking``); PARKED → IN_USE (``WorkersMoved``). A resume that cannot get a GPU back leaves
the cluster parked and says so (work that brought it fails with that line); the next try starts again. One resume at
a time: who asks while one is under way waits for it (``JoinResume``).

Work that reaches the scheduler while the cluster is parked resumes it first (``resume_on_work``, a scheduler
plugin: the resume runs off the scheduler's event loop while the graph's tasks wait), and so does a ``%%gpurun``
cell on it; a cell that sends it nothing resumes nothing. A stop, restart, scale, adapt or free of a parked cluster
resumes it first (the machine answers ``ResumeFirst``: ``resumed_first``, ``asking_workers``).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import time
from collections.abc import Iterable
from typing import Any

from gpu_magics.cluster.control import kernel_cluster, owner, parking, queries
from gpu_magics.cluster.control.answers import require_active
from gpu_magics.cluster.control.machine.events import (
    AdaptAsked,
    FreeAsked,
    Instruction,
    JoinPark,
    JoinResume,
    ResumeAsked,
    ResumeFailed,
    ResumeFirst,
    WorkersMoved,
    accepted,
)
from gpu_magics.cluster.options import PROG
from gpu_magics.cluster.reading.running import ActiveCluster, Parked
from gpu_magics.cluster.workers import checkpoint, kernel_park
from gpu_magics.text.errors import ClusterError, RankError, shown_as_one_line
from gpu_magics.text.said import say
from gpu_magics.text.units import dropped, format_seconds, one_line

PLUGIN_NAME = "gpu-magics-resume-on-work"


def resume(*, asked: bool = True) -> str | None:
    """Resume the parked workers of the cluster in use; one line with the time (``None`` where nothing was parked
    and ``asked`` is false: a cell's own resume that had nothing to do)."""
    current = kernel_cluster.in_use()
    state = None if current is None else current.parked
    parking_now = kernel_cluster.phase() is kernel_cluster.Phase.PARKED  # its workers may not be parked yet
    if current is None or (state is None and not parking_now):
        if not asked:
            return None
        if current is None:
            require_active("resume")
        raise ClusterError(f"{PROG} resume: {current.name!r} is not parked" if current else "nothing is parked")
    done: concurrent.futures.Future[None] = concurrent.futures.Future()
    answer = owner.post(ResumeAsked(current, done))
    park = next((item.done for item in answer if isinstance(item, JoinPark)), None)
    if park is not None:  # the park under way ends first (parked, or refused and in use again): then again
        park.result()
        return resume(asked=asked)
    joined = next((item.done for item in answer if isinstance(item, JoinResume)), None)
    if joined is not None:  # another thread resumes it: its end is this one's (its line is its own)
        joined.result()
    if joined is not None or not accepted(answer):  # (or it resumed already, or its park ended unparked)
        return None
    state = current.parked  # what the machine saw parked as it took this resume (a park may have ended since)
    assert state is not None
    began = time.perf_counter()
    try:
        kernel = kernel_park.resume()  # first: a parked kernel's own NVML reads wait (pre_execute has, in a cell)
        ended = _resume_workers(current, state)
        parking.gpu_monitors(current, True, kernel=False)
        restored = time.perf_counter()
        moved = _reload(current, state, ended)
        parking.last_figures["resume"] = {"driver": round(restored - began, 3), "copies": round(moved.seconds, 3)}
        parking.last_figures["resume copies"] = moved.steps
    except BaseException as error:  # the cluster stays parked: those waiting hear why
        owner.post(ResumeFailed(current))
        done.set_exception(error)
        raise
    owner.post(WorkersMoved(current))
    done.set_result(None)
    parking.record(current)
    if current.idle_park is not None:  # idle from now on: parked again after as long
        current.idle_park.arm()
    back = parking.Members(
        {name: pid for name, pid in state.processes.items() if name not in ended},
        {name: pid for name, pid in state.ranks.items() if name not in ended},
    )
    gone = ""
    if ended:  # a worker's nanny started a new one, which was never parked; a rank's world starts anew
        many = len(ended) > 1
        named = ", ".join(sorted(f"worker {name}" if name in state.processes else name for name in ended))
        gone = (
            f"; {named} had ended while parked: what {'they' if many else 'it'} held is gone, and dask computes "
            "again what it can"
        )
        if any(name in state.ranks for name in ended):
            gone += " (every rank starts anew at the next SPMD cell)"
    copiers = "workers and the ranks" if back.ranks else "workers"
    return (
        f"{PROG}: resumed {back.words()} of {current.name!r}{current.manager.park_note} in "
        f"{format_seconds(time.perf_counter() - began)}{moved.words(f'copied back by the {copiers}')}{gone}"
        f"{'; ' + kernel.removeprefix(PROG + ': ') if kernel else ''}"
    )


def _reload(current: ActiveCluster, state: Parked, ended: list[str]) -> parking.Moved:
    """The workers and the ranks copy their data back onto their GPUs (where one cannot: the resume fails in one
    line, the cluster stays parked with its data, and the next try copies again)."""
    party = parking.Members(state.processes, state.ranks, queries.rank_park())
    try:
        return parking.reload_members(current, party, [name for name in state.ranks if name not in ended])
    except (*parking.COPY_FAILURES, RankError) as error:  # CUDA's errors, a full GPU, a process silent or gone
        raise ClusterError(
            f"{PROG} resume: the processes of {current.name!r} could not copy their data back onto their GPUs "
            f"({one_line(error)}); they stay parked, with their data: run {PROG} resume to try again"
        ) from None


def _resume_workers(current: ActiveCluster, state: Parked) -> list[str]:
    """Every parked process of ``current`` that still runs, restored and unlocked at once; the names of those that
    ended while parked (a kill, an out-of-memory end: nothing to resume). A ``ClusterError`` names those that could
    not take their GPU back."""
    processes = state.all_processes
    ended = [name for name, pid in processes.items() if not parking.running(pid)]
    alive = {name: pid for name, pid in processes.items() if name not in ended}
    short = checkpoint.short_of_memory(state.comes_back, checkpoint.free_by_gpu()) if alive else None
    if short is not None:  # a restore that finds too little memory can fail the process for good: not asked
        raise ClusterError(
            f"{PROG} resume: the processes of {current.name!r} cannot take their GPUs back yet ({short}); they stay "
            f"parked, with their data: free GPU memory, then run the cell again, or {PROG} resume"
        )
    failed = parking.all_at_once(parking.resume_one, alive)
    if failed:
        names = "; ".join(f"{name}: {why}" for name, why in failed.items())
        raise ClusterError(
            f"{PROG} resume: {len(failed)} of {len(processes)} processes of {current.name!r} could not take their GPU "
            f"back ({names}); they stay parked, with their data: run {PROG} resume to try again"
        )
    return ended


def resume_for_work() -> None:
    """Before work goes to the cluster in use: resume it where it is parked, saying so in one line."""
    said = resume(asked=False)
    if said is not None:
        say(said)


queries.before_direct_work(resume_for_work)  # an SPMD cell reaches the workers without the scheduler's plugin


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
        raise ClusterError(parking.refused(verb, event.cluster))


def watch_for_work(current: ActiveCluster) -> None:
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
            if parked is None and kernel_cluster.phase() is not kernel_cluster.Phase.PARKED:
                return
            waiting = [  # a park still under way: all of them wait for it, then for the resume
                a for a, worker in scheduler.workers.items() if parked is None or str(worker.name) in parked.processes
            ]
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
