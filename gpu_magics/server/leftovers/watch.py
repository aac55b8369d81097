"""``LeftoverWatch``: records the processes of the server's kernels every ``INTERVAL`` seconds, on the server's
event loop (``/proc`` read on a worker thread), and says which of them outlived their kernel on the GPUs."""

from __future__ import annotations

import asyncio
from typing import Any

from tornado.ioloop import IOLoop, PeriodicCallback

from gpu_magics.server.leftovers import store
from gpu_magics.server.leftovers.registry import KernelProcesses, Leftover, Started
from gpu_magics.server.ownership.kernels import kernel_pids
from gpu_magics.server.service import MonitorService

INTERVAL = 2.0  # seconds between looks at the kernels' processes (a process started and orphaned in between is missed)


class LeftoverWatch:
    """The registry of the kernels' processes, kept up to date while the server runs."""

    def __init__(self, service: MonitorService, kernel_manager: Any, interval: float = INTERVAL) -> None:
        self.service = service
        self.registry = KernelProcesses()
        self._kernel_manager = kernel_manager
        self._callback: PeriodicCallback | None = None
        self._interval = interval
        self._busy = False
        self._saved: list[Started] | None = None
        self._loaded = False

    def start(self) -> None:
        """Begin looking (on the event loop)."""
        if self._callback is None:
            self._callback = PeriodicCallback(self.observe, self._interval * 1000)
            self._callback.start()
            IOLoop.current().add_callback(self.observe)

    async def observe(self) -> None:
        """Record the kernels' processes now (one look at a time)."""
        if self._busy:
            return
        self._busy = True
        try:  # a failure is logged by the periodic callback, and the next look tries again
            pids = kernel_pids(self._kernel_manager)
            await asyncio.get_running_loop().run_in_executor(None, self._look, pids)
        finally:
            self._busy = False

    def _look(self, pids: dict[int, str]) -> None:
        """On a worker thread: the first look takes over what ended servers recorded; each look saves what changed."""
        if not self._loaded:
            self._loaded = True
            self.registry.add(store.load_ended_servers())
        self.registry.observe(pids)
        recorded = sorted(self.registry.recorded(), key=lambda entry: (entry.pid, entry.started))
        if recorded != self._saved:
            store.save(recorded)
            self._saved = recorded

    async def current(self) -> list[Leftover]:
        """The leftovers on the server's GPUs now (the first call waits for the sampler's first reading)."""
        sampler = self.service.ensure_started()
        snapshot = sampler.latest() or await self.service.latest()
        found: list[Leftover] = await asyncio.get_running_loop().run_in_executor(
            None, self.registry.leftovers, snapshot
        )
        return found

    def close(self) -> None:
        callback, self._callback = self._callback, None
        if callback is not None:
            callback.stop()
