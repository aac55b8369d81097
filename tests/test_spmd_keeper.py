"""The rank host's plugin on a real worker in this process (a real scheduler, worker and rank process; the worker
closes while the process that ran it lives on, so only the plugin can end the rank): the rank process is kept by a
worker plugin on that worker alone, ends when its kernel removes it, and ends when the worker closes."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import psutil
import pytest
from distributed import Scheduler, Worker

from gpu_magics.spmd.messages import RunCommand
from gpu_magics.spmd.worker import host

pytestmark = pytest.mark.slow

ENV = {"RANK": "0", "WORLD_SIZE": "1", "CUDA_VISIBLE_DEVICES": "", "GPU_MAGICS_SPMD_DEVICE": "cpu"}


def gone(pid: int) -> bool:
    return not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE


def on_a_worker(body: Callable[[Scheduler, Worker], Awaitable[None]]) -> None:
    async def run() -> None:
        async with Scheduler(port=0, dashboard_address=":0") as scheduler:
            worker = await Worker(scheduler.address, nthreads=1, dashboard_address=":0")
            try:
                await body(scheduler, worker)
            finally:
                await worker.close()

    asyncio.run(asyncio.wait_for(run(), 120))


def test_the_rank_is_kept_by_a_plugin_on_its_worker_only_and_ends_when_its_kernel_removes_it() -> None:
    async def body(scheduler: Scheduler, worker: Worker) -> None:
        pid = await host.start("kernel-a", "topic-a", ENV, worker)
        assert isinstance(worker.plugins[host.PLUGIN_PREFIX + "kernel-a"], host.RankKeeper)
        assert not [name for name in scheduler.worker_plugins if name.startswith(host.PLUGIN_PREFIX)]
        command: RunCommand = {"op": "run", "code": "6 * 7", "name": "<rank cell 1>", "cell": "c1", "gpu_wait_s": 1}
        reply = await host.ask("kernel-a", command, worker)
        assert reply["ok"] and reply["repr"] == "42"
        assert host.rank_pids(worker) == {"kernel-a": pid}
        again = await host.start("kernel-a", "topic-a", ENV, worker)  # a new world: the old plugin's rank ends
        assert again != pid and gone(pid)
        assert await host.end("kernel-a", worker) is True
        assert gone(again) and host.PLUGIN_PREFIX + "kernel-a" not in worker.plugins
        assert await host.end("kernel-a", worker) is False
        ended: Any = await host.ask("kernel-a", command, worker)
        assert ended["ended"] and ended["before"]

    on_a_worker(body)


def test_a_worker_that_closes_ends_its_ranks_through_their_plugins() -> None:
    async def body(scheduler: Scheduler, worker: Worker) -> None:
        pids = [await host.start(owner, f"topic-{owner}", ENV, worker) for owner in ("kernel-a", "kernel-b")]
        assert not any(gone(pid) for pid in pids)
        await worker.close()
        assert all(gone(pid) for pid in pids)

    on_a_worker(body)
