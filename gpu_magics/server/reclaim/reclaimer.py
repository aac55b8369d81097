"""``IdleReclaim``: after each ``/metrics`` refresh, asks the kernels whose GPU memory has sat on idle GPUs for
``GpuMagicsServer.idle_reclaim_min`` to give it back (once per idle stretch, only while the kernel runs no cell),
and counts what they did for ``gpu_magics_idle_reclaims_total``."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable, Iterator
from typing import Any

from prometheus_client.core import Metric

from gpu_magics.server.metrics.holds import Hold
from gpu_magics.server.metrics.labels import Place
from gpu_magics.server.reclaim.kernel_call import KernelCallError, evaluate

_log = logging.getLogger(__name__)

COUNTER = "gpu_magics_idle_reclaims"  # exposed as gpu_magics_idle_reclaims_total
ACTIONS = ("freed_cache", "stopped_cluster", "parked_cluster", "kept_cluster", "failed")  # the label's only values
HELP = (
    "What GpuMagicsServer.idle_reclaim_min did to kernels whose GPU memory sat on idle GPUs: freed_cache (their "
    "pools gave back what they cached), stopped_cluster (an idle cluster that held none of the user's data), "
    "parked_cluster (its GPU workers gave their GPUs back, their data kept: idle_reclaim_park), kept_cluster (left "
    "running: it holds the user's data, or runs), failed (the kernel did not answer)."
)
CALL_TIMEOUT_S = 120.0  # closing a cluster takes seconds; a kernel that takes longer is counted failed
RUN = "__import__('gpu_magics.cluster.control.verbs.reclaim', fromlist=['run']).run"
LOADED = "'gpu_magics.cluster' in __import__('sys').modules"  # a kernel that never loaded it is not made to


def expression(idle_s: float, park: bool = False) -> str:
    """What the kernel evaluates: the reclaim where the kernel uses gpu_magics, else ``None``."""
    return f"{RUN}({float(idle_s)!r}, park={bool(park)!r}) if {LOADED} else None"


def due(holds: Iterable[Hold], running: set[str], after_s: float, now: float, done: dict[str, float]) -> list[Hold]:
    """The holds to act on now: a running kernel's memory on idle GPUs for ``after_s``, with something to give
    back (a cache, a cluster it started), whose stretch (its ``since``) was not acted on already (``done``)."""
    found = []
    for hold in holds:
        if hold.kernel_id not in running or hold.since is None or now - hold.since < after_s:
            continue
        if done.get(hold.kernel_id) == hold.since or (hold.cached <= 0 and hold.cluster is None):
            continue
        found.append(hold)
    return found


class IdleReclaim:
    """The server's side of the reclaim; ``consider`` is called on the event loop after each refresh."""

    def __init__(
        self, kernel_manager: Any, after_min: float, log: logging.Logger | None = None, *, park: bool = False
    ) -> None:
        self.kernel_manager = kernel_manager
        self.park = park  # idle_reclaim_park: park the cluster rather than close it or leave it running
        self.log = log or _log  # the server's own log, where its admin reads
        self.after_s = float(after_min) * 60
        self.counts = dict.fromkeys(ACTIONS, 0)
        self._done: dict[str, float] = {}  # kernel -> the idle stretch (its start) already acted on
        self._tasks: dict[str, asyncio.Task[None]] = {}

    def consider(self, holds: Iterable[Hold], running: set[str]) -> None:
        """Start the requests due now (a kernel that runs a cell is asked at a later refresh)."""
        self._done = {kernel: since for kernel, since in self._done.items() if kernel in running}
        for hold in due(holds, running, self.after_s, time.time(), self._done):
            kernel = hold.kernel_id
            task = self._tasks.get(kernel)
            if (task is not None and not task.done()) or not self._idle(kernel):
                continue
            assert hold.since is not None
            self._done[kernel] = hold.since
            self._tasks[kernel] = asyncio.get_running_loop().create_task(self._ask(hold, time.time() - hold.since))

    def _idle(self, kernel_id: str) -> bool:
        try:
            return getattr(self.kernel_manager.get_kernel(kernel_id), "execution_state", None) == "idle"
        except KeyError:  # ended meanwhile
            return False

    async def _ask(self, hold: Hold, idle_s: float) -> None:
        try:
            answer = await evaluate(self.kernel_manager, hold.kernel_id, expression(idle_s, self.park), CALL_TIMEOUT_S)
        except KeyError:  # the kernel ended meanwhile: nothing to give back
            return
        except (KernelCallError, Exception) as error:  # any failure of the request: counted, the server goes on
            self.counts["failed"] += 1
            self.log.warning("gpu_magics: kernel %s did not give back its idle GPU memory: %s", hold.kernel_id, error)
            return
        if not isinstance(answer, dict):  # it does not use gpu_magics: nothing it can be asked
            return
        for action, happened in (("freed_cache", (answer.get("freed") or 0) > 0),
                                 ("stopped_cluster", bool(answer.get("stopped"))),
                                 ("parked_cluster", bool(answer.get("parked"))),
                                 ("kept_cluster", bool(answer.get("kept")))):  # fmt: skip
            self.counts[action] += happened
        if answer.get("line"):
            self.log.info("gpu_magics: kernel %s (%s): %s", hold.kernel_id, hold.path or "no notebook", answer["line"])

    def families(self, place: Place | None) -> Iterator[Metric]:
        """``gpu_magics_idle_reclaims_total``, one series per action (0 until it happens)."""
        metric = Metric(COUNTER, HELP, "counter")
        pod = place.pod if place is not None else ()
        for action in ACTIONS:
            metric.add_sample(f"{COUNTER}_total", {"action": action, **dict(pod)}, float(self.counts[action]))
        yield metric

    def close(self) -> None:
        """Stop waiting for answers (the server is closing; what the kernels do goes on there)."""
        for task in self._tasks.values():
            if not task.done():
                task.cancel()
        self._tasks.clear()
