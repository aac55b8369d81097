"""The rank host's plugin on a real worker in this process (a real scheduler, worker and rank process; the worker
closes while the process that ran it lives on, so only the plugin can end the rank): the rank process is kept by a
worker plugin on that worker alone, ends when its kernel removes it, and ends when the worker closes."""

from __future__ import annotations

import asyncio
import pickle
from collections.abc import Awaitable, Callable
from typing import Any

import psutil
import pytest
from distributed import Scheduler, Worker
from distributed.comm import get_address_host

from gpu_magics.spmd import channel
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
        pid = (await host.start("kernel-a", "topic-a", ENV, worker))["pid"]
        assert isinstance(worker.plugins[host.PLUGIN_PREFIX + "kernel-a"], host.RankKeeper)
        assert not [name for name in scheduler.worker_plugins if name.startswith(host.PLUGIN_PREFIX)]
        command: RunCommand = {"op": "run", "code": "6 * 7", "name": "<rank cell 1>", "cell": "c1", "gpu_wait_s": 1}
        reply = await host.ask("kernel-a", command, worker)
        assert reply["ok"] and reply["repr"] == "42"
        assert host.rank_pids(worker) == {"kernel-a": pid}
        again = (await host.start("kernel-a", "topic-a", ENV, worker))["pid"]  # a new world: the old rank ends
        assert again != pid and gone(pid)
        assert await host.end("kernel-a", worker) is True
        assert gone(again) and host.PLUGIN_PREFIX + "kernel-a" not in worker.plugins
        assert await host.end("kernel-a", worker) is False
        ended: Any = await host.ask("kernel-a", command, worker)
        assert ended["ended"] and ended["before"]

    on_a_worker(body)


def test_a_worker_that_closes_ends_its_ranks_through_their_plugins() -> None:
    async def body(scheduler: Scheduler, worker: Worker) -> None:
        pids = [(await host.start(owner, f"topic-{owner}", ENV, worker))["pid"] for owner in ("kernel-a", "kernel-b")]
        assert not any(gone(pid) for pid in pids)
        await worker.close()
        assert all(gone(pid) for pid in pids)

    on_a_worker(body)


def run_command(code: str, cell: str) -> RunCommand:
    return {"op": "run", "code": code, "name": f"<rank {cell}>", "cell": cell, "gpu_wait_s": 1}


def test_the_cell_channel_carries_commands_to_the_rank_and_closes_with_it() -> None:
    async def body(scheduler: Scheduler, worker: Worker) -> None:
        started = await host.start("kernel-a", "topic-a", ENV, worker)
        assert started["channel"] is not None
        where, port, token = started["channel"]
        assert where == get_address_host(worker.address) and port > 0 and len(token) == channel.TOKEN_BYTES
        caller = await channel.Caller.connect(where, port, token)
        first, second = await asyncio.gather(  # two at once, each matched to its own reply
            caller.ask(run_command("x = 6 * 7", "c1")), caller.ask({"op": "pull", "names": ["x"]})
        )
        assert first["ok"] and first["repr"] is None and second["values"]["x"][1] == "42"
        said = await caller.ask(run_command("print('hello'); x", "c2"))
        assert said["repr"] == "42" and [line[2] for line in said["lines"]] == ["hello"]
        await host.end("kernel-a", worker)  # the rank ends: its listener closes, the kernel's call says so
        with pytest.raises(ConnectionError):
            await caller.ask(run_command("x", "c3"))
        with pytest.raises(OSError):
            await channel.Caller.connect(where, port, token)
        caller.close()

    on_a_worker(body)


def test_a_connection_without_the_token_is_closed_before_anything_it_sends_is_read() -> None:
    async def body(scheduler: Scheduler, worker: Worker) -> None:
        started = await host.start("kernel-a", "topic-a", ENV, worker)
        assert started["channel"] is not None
        where, port, token = started["channel"]
        for wrong in (bytes(channel.TOKEN_BYTES), token[:-1], token + b"!"):
            reader, writer = await asyncio.open_connection(where, port)
            writer.write(channel.frame(wrong))
            writer.write(channel.frame(pickle.dumps((1, run_command("hacked = True", "c1")))))
            await writer.drain()
            assert await asyncio.wait_for(reader.read(), 10) == b""  # closed, nothing answered
            writer.close()
        reader, writer = await asyncio.open_connection(where, port)  # a connection that says nothing is closed too
        assert await asyncio.wait_for(reader.read(), channel.TOKEN_WAIT_S + 10) == b""
        writer.close()
        reply = await host.ask("kernel-a", run_command("'hacked' in globals()", "c2"), worker)
        assert reply["repr"] == "False"
        await host.end("kernel-a", worker)

    on_a_worker(body)


def test_rendezvous_ports_are_free_distinct_and_below_the_hosts_ephemeral_range(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    """A port below the ephemeral range is never handed to another process's ``bind(0)`` or outgoing connection
    between the probe and the rank's own bind; one in use is passed over; without room, any free port."""
    import socket
    from types import SimpleNamespace

    worker = SimpleNamespace(address="tcp://127.0.0.1:1")
    ranges = tmp_path / "ip_local_port_range"
    ranges.write_text("32768\t60999\n")
    monkeypatch.setattr(host, "EPHEMERAL", str(ranges))
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    try:
        monkeypatch.setattr(host.random, "sample", lambda span, k: [taken.getsockname()[1], *list(span)[:k]][:k])
        ports = host.free_ports(2, worker)
        assert len(set(ports)) == 2 and all(host.FIRST_PORT <= port < 32768 for port in ports)
        assert taken.getsockname()[1] not in ports
        ranges.write_text("20000\t60999\n")  # no room below it: the host's own choice
        assert len(set(host.free_ports(2, worker))) == 2
    finally:
        taken.close()
