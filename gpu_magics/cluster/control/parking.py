"""In the kernel: the work behind ``%gpucluster park`` and ``resume`` (the verbs: ``verbs.park``,
``verbs.resume``): every GPU worker process of the cluster locked and checkpointed at once through the CUDA driver
(``workers.checkpoint``: its GPU memory goes to host memory, the GPU is released), or restored and unlocked at once;
the GPU memory they hold; the tasks that run on them; the record that says the cluster is parked; the line of a verb
its phase refuses. No event of the cluster is posted here.
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import Callable, Iterable

from gpu_magics.cluster.control import kernel_cluster, record_writer
from gpu_magics.cluster.options import PROG
from gpu_magics.cluster.reading.running import ActiveCluster
from gpu_magics.cluster.workers import checkpoint


def park_one(pid: int) -> None:
    """Lock and checkpoint the process (a refusal leaves it running, unlocked)."""
    driver = checkpoint.driver()
    driver.lock(pid)
    try:
        driver.checkpoint(pid)
    except checkpoint.CheckpointError:
        driver.unlock(pid)  # locked only: it goes on as it was
        raise


def resume_one(pid: int) -> None:
    """From wherever the process got (a resume tried before may have brought some back): running again."""
    driver = checkpoint.driver()
    state = driver.state(pid)
    if state == "checkpointed":
        driver.restore(pid)
        state = "locked"
    if state == "locked":
        driver.unlock(pid)


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


def gpu_bytes(pids: Iterable[int]) -> dict[int, int]:
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
