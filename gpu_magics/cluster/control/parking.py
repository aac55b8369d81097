"""In the kernel: the work behind ``%gpucluster park`` and ``resume`` (the verbs: ``verbs.park``,
``verbs.resume``). A park first has every worker copy its device arrays to host memory itself and free them
(``workers.offload``: parallel copies, at the bus's pace), where the host has the memory for them; then every GPU
worker process is locked and checkpointed at once through the CUDA driver (``workers.checkpoint``: what is left of
its GPU memory goes to host memory, the GPU is released). A resume restores and unlocks them at once, then has the
workers copy their arrays back. Also: the GPU memory they hold, the tasks that run on them, the record that says the
cluster is parked, the line of a verb its phase refuses. No event of the cluster is posted here.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import socket
import threading
from collections.abc import Callable, Iterable
from typing import Any

from gpu_magics.cluster.control import kernel_cluster, record_writer
from gpu_magics.cluster.options import PROG
from gpu_magics.cluster.reading.running import ActiveCluster
from gpu_magics.cluster.workers import checkpoint, offload
from gpu_magics.text.units import format_bytes

COPY_FAILURES = (MemoryError, OSError, RuntimeError, ValueError, TimeoutError)  # a worker's copies failing: CUDA's
# errors (CuPy's are RuntimeErrors, its out-of-memory a MemoryError), host memory, a worker silent or gone
last_figures: dict[str, dict[str, float]] = {}  # the last park's and resume's seconds by step (benchmarks)
MONITOR_WAIT_S = 5.0  # how long a park waits for the scheduler's event loop to take its monitor's change
HOST_HEADROOM = 0.9  # the share of a host's available memory a park may fill with the workers' arrays


@dataclasses.dataclass(frozen=True)
class Moved:
    """What the workers copied themselves (to host memory at a park, back at a resume): bytes, and the slowest
    worker's seconds."""

    bytes: int = 0
    seconds: float = 0.0
    steps: dict[str, float] = dataclasses.field(default_factory=dict)  # the slowest worker's, by step (benchmarks)

    def words(self, way: str) -> str:
        """`` (7.9 GiB of it copied to host memory at 48.2 GiB/s)``; nothing where nothing moved."""
        if self.bytes <= 0:
            return ""
        return f" ({format_bytes(self.bytes)} {way} at {format_bytes(int(self.bytes / max(self.seconds, 1e-6)))}/s)"


@dataclasses.dataclass
class Members:
    """What a park takes: the workers' processes, the SPMD ranks' (with the kernel's handle on them), and this
    kernel's GPU memory by GPU (empty: it holds none, or is not parked with them)."""

    workers: dict[str, int]
    ranks: dict[str, int] = dataclasses.field(default_factory=dict)
    rank_calls: Any = None  # the ranks' side of the park (``queries.rank_park``)
    kernel: dict[str, int] = dataclasses.field(default_factory=dict)

    def words(self) -> str:
        """``2 workers, 2 ranks and this kernel``."""
        parts = [_count(len(self.workers), "worker")]
        if self.ranks:
            parts.append(_count(len(self.ranks), "rank"))
        if self.kernel:
            parts.append("this kernel")
        return parts[0] if len(parts) == 1 else f"{', '.join(parts[:-1])} and {parts[-1]}"


def _count(count: int, what: str) -> str:
    return f"{count} {what}{'s' if count != 1 else ''}"


def members(current: ActiveCluster, workers: dict[str, int], *, kernel_too: bool) -> Members:
    """The park's members: the cluster's parkable workers, the ranks on them, and this kernel where it holds GPU
    memory and may be parked now (``kernel_too``: not from another thread while a cell runs, whose next CUDA call
    would then wait for a resume that only the next execution brings)."""
    from gpu_magics.cluster.control import queries
    from gpu_magics.cluster.workers import kernel_park

    rank_calls = queries.rank_park()
    ranks = {} if rank_calls is None else rank_calls.parkable(offload.simulated_here())
    kernel = kernel_park.held() if kernel_too else {}
    return Members(dict(workers), ranks, rank_calls, kernel)


def host_refusal(current: ActiveCluster, party: Members) -> str | None:
    """Where what the park moves would not fit in its host's available memory: the park's one line; else
    ``None``. Asked of every worker (and rank) before anything moves; the kernel's own memory counts on its host."""
    plans = current.client.run(offload.plan, _device())
    arrays: dict[str, int] = {}
    taken: dict[str, int] = {}
    available: dict[str, int] = {}
    for plan in plans.values():
        host = plan["host"]
        arrays[host] = arrays.get(host, 0) + int(plan["bytes"])
        taken[host] = taken.get(host, 0) + int(plan["taken"])
        available[host] = min(available.get(host, plan["available"]), int(plan["available"]))
    others = _ranks_planned(party) + sum(party.kernel.values())
    if others:
        here = socket.gethostname()  # the ranks run beside their workers, which a park reaches from here
        arrays[here] = arrays.get(here, 0) + others
        taken[here] = taken.get(here, 0) + others
        available.setdefault(here, offload.device(offload.simulated_here()).host_available())
    for host, size in arrays.items():
        if taken[host] > HOST_HEADROOM * available[host]:
            return (
                f"{PROG} park: nothing parked: the {format_bytes(size)} it moves need as much host memory on {host}, "
                f"where {format_bytes(available[host])} is available; free host memory, or let go of data the "
                "notebook no longer needs, then park again"
            )
    return None


def _ranks_planned(party: Members) -> int:
    if not party.ranks or party.rank_calls is None:
        return 0
    return int(party.rank_calls.planned(party.ranks))


def offload_members(current: ActiveCluster, party: Members) -> Moved:
    """The workers, the ranks and this kernel (its CuPy arrays, where it is parked too) copy their GPU data to host
    memory and free it, all at once."""
    from gpu_magics.cluster.workers import kernel_arrays

    others: list[Callable[[], dict[str, Any]]] = []
    if party.ranks and party.rank_calls is not None:
        ranks, calls = dict(party.ranks), party.rank_calls
        others.append(lambda: calls.offload(ranks))
    if party.kernel:
        others.append(lambda: {"kernel": kernel_arrays.offload()})
    return _beside(others, lambda: offload_all(current), "gpu-magics-park")


def reload_members(current: ActiveCluster, party: Members, alive: Iterable[str] | None = None) -> Moved:
    """The workers and the ranks (those of ``alive`` among them, where given) copy their data back, all at once; and
    this kernel's arrays where a park that failed had copied them out."""
    from gpu_magics.cluster.workers import kernel_arrays

    names = set(party.ranks if alive is None else alive)
    ranks = {name: pid for name, pid in party.ranks.items() if name in names}
    others: list[Callable[[], dict[str, Any]]] = []
    if ranks and party.rank_calls is not None:
        calls = party.rank_calls
        others.append(lambda: calls.reload(ranks))
    others.append(lambda: {"kernel": kernel_arrays.reload()})  # (nothing to do unless a park left them out)
    return _beside(others, lambda: reload_all(current), "gpu-magics-resume")


def _beside(others: list[Callable[[], dict[str, Any]]], workers: Callable[[], Moved], name: str) -> Moved:
    """``workers`` here while the ``others`` (answers by process, as ``client.run``'s) run on threads; all of their
    copies together."""
    if not others:
        return workers()
    with concurrent.futures.ThreadPoolExecutor(len(others), thread_name_prefix=name) as pool:
        running = [pool.submit(other) for other in others]
        moved = workers()
        for done in running:
            moved = _together(moved, _moved(done.result()))
        return moved


def _together(first: Moved, second: Moved) -> Moved:
    """Two sets of copies that ran at once: their bytes, the slower one's time and steps."""
    slower = first if first.seconds >= second.seconds else second
    return Moved(first.bytes + second.bytes, slower.seconds, slower.steps)


def offload_all(current: ActiveCluster) -> Moved:
    """Every worker copies its device arrays to host memory and frees them, at once."""
    return _moved(current.client.run(offload.offload, _device()))


def reload_all(current: ActiveCluster) -> Moved:
    """Every worker copies back what its last offload holds (a worker that holds nothing answers at once; one
    that ended while parked, which the scheduler may still list, holds nothing to copy back)."""
    answers = current.client.run(offload.reload, _device(), on_error="return")
    for answer in answers.values():
        if isinstance(answer, BaseException) and not isinstance(answer, OSError):  # (a gone worker's comm: OSError)
            raise answer
    return _moved({address: answer for address, answer in answers.items() if isinstance(answer, dict)})


def _device() -> offload.Device:
    """The device the workers copy from, as this kernel knows it (sent with each call: pickled, a few bytes)."""
    return offload.device(offload.simulated_here())


def _moved(answers: dict[str, dict[str, Any]]) -> Moved:
    figures = list(answers.values())
    if not figures:
        return Moved()
    slowest = max(figures, key=lambda f: float(f.get("seconds", 0.0)))
    steps = {step: round(seconds, 3) for step, seconds in (slowest.get("steps") or {}).items()}
    return Moved(int(sum(f.get("bytes", 0) for f in figures)), float(slowest.get("seconds", 0.0)), steps)


def gpu_monitors(current: ActiveCluster, on: bool, *, kernel: bool) -> None:
    """distributed's system monitors read NVML on their event loops every half second, and a parked process's NVML
    read waits until it is resumed: off in the workers (and in the scheduler here, where ``kernel`` is parked too)
    while parked, back on after the resume. A worker that does not answer is left as it is."""
    with contextlib.suppress(OSError, RuntimeError, TimeoutError):
        current.client.run(offload.gpu_monitor, on, on_error="ignore")
    if not kernel and on is False:
        return
    from gpu_magics.cluster.reading import inspection

    scheduler = inspection.local_scheduler(current.client)
    if scheduler is None:
        return
    changed = threading.Event()

    def change() -> None:  # on the scheduler's event loop, between two of the monitor's reads
        offload.scheduler_gpu_monitor(on, scheduler)
        changed.set()

    scheduler.loop.add_callback(change)
    changed.wait(MONITOR_WAIT_S)


def park_one(pid: int) -> None:
    """Lock and checkpoint the process (a refusal leaves it running, unlocked)."""
    checkpoint.park_process(checkpoint.driver(), pid)


def running(pid: int) -> bool:
    """Whether the process still runs (a worker killed while parked has nothing to resume)."""
    import psutil

    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def resume_one(pid: int) -> None:
    """From wherever the process got (a resume tried before may have brought some back): running again."""
    checkpoint.resume_process(checkpoint.driver(), pid)


def all_at_once(step: Callable[[int], None], processes: dict[str, int]) -> dict[str, str]:
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


def gpu_bytes_by_gpu(pids: Iterable[int]) -> dict[int, dict[str, int]]:
    """The GPU memory each process holds now, by pid and GPU UUID (one read of NVML's process lists)."""
    from gpu_magics.cluster.workers.kernel_context import processes_memory

    return {pid: {uuid: used or 0 for uuid, used in held.items()} for pid, held in processes_memory(pids).items()}


def gpu_bytes(pids: Iterable[int]) -> dict[int, int]:
    """The GPU memory each process holds now, by pid (one read of NVML's process lists)."""
    from gpu_magics.cluster.workers.kernel_context import processes_memory

    return {pid: sum(used or 0 for used in held.values()) for pid, held in processes_memory(pids).items()}


UNFINISHED = frozenset({"waiting", "queued", "no-worker", "processing"})  # a graph's tasks still to run


def running_tasks(current: ActiveCluster) -> int:
    """How many tasks run or wait to run on the cluster now (the scheduler in this process: no round trip). Those
    that wait count too: between two tasks of a graph none may be running, and a park then would leave the next
    ones reading the placeholders of data moved to host memory."""
    from gpu_magics.cluster.reading import inspection

    scheduler = inspection.local_scheduler(current.client)
    if scheduler is None:
        return 0
    tasks = list(scheduler.tasks.values())  # (one copy in C: the scheduler's loop changes the dict meanwhile)
    return sum(task.state in UNFINISHED for task in tasks)


def record(current: ActiveCluster) -> None:
    """The cluster's record says whether it is parked (the side panel's card, the status bar, ``/metrics``)."""
    if current.record is not None:
        record_writer.write_record(current, refresh=True)


def refused(verb: str, current: ActiveCluster) -> str:
    """A verb the phase refuses, in one line: what to do instead."""
    phase = kernel_cluster.phase()
    if phase is kernel_cluster.Phase.PARKED:
        return f"{PROG} {verb}: {current.name!r} is parked already; {PROG} resume brings it back"
    return f"{PROG} {verb}: {current.name!r} is {phase.value}; wait for it, then run this again"
