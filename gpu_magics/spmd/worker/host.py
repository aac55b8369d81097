"""The rank host, in a Dask worker: the rank process of each kernel that owns ranks here, kept by a worker plugin.

The kernel calls the module-level functions below through ``Client.run`` (each takes ``dask_worker``). A kernel's
rank process is kept by a ``RankKeeper``, a plugin added to the worker's own plugins when the rank starts
(``Worker.plugin_add``) and removed when the kernel ends it; its ``teardown`` ends the process, so a worker that
closes (``Worker.close`` removes every plugin) ends its ranks on the way, as distributed's ``ForwardLoggingPlugin``
takes its log handler away. The plugin lives in the worker only, never on the scheduler: a worker that joins
later gets no rank of this kernel until a new world starts one there.
"""

from __future__ import annotations

import asyncio
import os
import random
import socket
from typing import Any

from distributed.diagnostics.plugin import WorkerPlugin

from gpu_magics.spmd.channel import Listener
from gpu_magics.spmd.messages import Command, Probe, ProbedGpu, RankStarted, Reply, Where, ended_reply
from gpu_magics.spmd.worker.rank_env import RANK_ENV, numbered_devices, torchrun_defaults, with_defaults
from gpu_magics.spmd.worker.rank_process import RankProcess

PLUGIN_PREFIX = "gpu-magics-spmd-ranks-"


class RankKeeper(WorkerPlugin):
    """Keeps ``owner``'s rank process on one worker; its teardown (the plugin removed, the worker closing) ends
    it."""

    def __init__(self, owner: str) -> None:
        self.owner = owner
        self.name = PLUGIN_PREFIX + owner
        self.process: RankProcess | None = None
        self.listener: Listener | None = None  # the kernel's cell channel to this rank

    async def teardown(self, worker: Any) -> None:
        process, self.process = self.process, None
        listener, self.listener = self.listener, None
        if process is not None:  # first: its pending commands get their "ended" replies, which the channel sends
            await process.kill()
        if listener is not None:
            await listener.close()


def _keeper(worker: Any, owner: str) -> RankKeeper | None:
    found = worker.plugins.get(PLUGIN_PREFIX + owner)
    return found if isinstance(found, RankKeeper) else None


def _kept(worker: Any, owner: str) -> RankProcess | None:
    keeper = _keeper(worker, owner)
    return None if keeper is None else keeper.process


async def _release(worker: Any, owner: str) -> bool:
    """Remove ``owner``'s plugin (its teardown ends a rank process still running); whether it had one."""
    keeper = _keeper(worker, owner)
    if keeper is None:
        return False
    await worker.plugin_remove(keeper.name)
    return True


# -- what the kernel calls (Client.run) ----------------------------------------------------------------------------


def probe(dask_worker: Any) -> Probe:
    """What this worker is: its host, its GPU (``CUDA_VISIBLE_DEVICES``' first entry, as dask-cuda gives each
    worker its own GPU first), and which frameworks it can import."""
    import importlib.util

    from distributed.comm import get_address_host

    from gpu_magics import gpus

    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    devices = gpus.inventory().devices()
    gpu: ProbedGpu | None = None
    if devices and visible != "":
        first = devices[0]
        gpu = {"uuid": first.uuid, "cuda_id": first.cuda_id, "name": first.name}
    return {
        "host": get_address_host(dask_worker.address),
        "name": str(dask_worker.name),
        "pid": os.getpid(),
        "visible": visible,
        "gpu": gpu,
        "has_torch": importlib.util.find_spec("torch") is not None,
        "has_jax": importlib.util.find_spec("jax") is not None,
    }


FIRST_PORT = 20000  # the rendezvous ports are drawn from here up to the host's ephemeral range
EPHEMERAL = "/proc/sys/net/ipv4/ip_local_port_range"


def free_ports(count: int, dask_worker: Any) -> list[int]:
    """``count`` ports free now on this worker's host, for the ranks' rendezvous (see ``free_ports_on``)."""
    from distributed.comm import get_address_host

    return free_ports_on(get_address_host(dask_worker.address), count)


def free_ports_on(host: str, count: int) -> list[int]:
    """``count`` ports free now on ``host`` (all at once, so they differ). They are drawn below the host's
    ephemeral range where it can: a port the kernel hands out to any ``bind(0)`` or outgoing connection could be
    taken by another process between this probe and the user's own bind (``EADDRINUSE``)."""
    probes: list[socket.socket] = []
    try:
        for port in _candidates(count * 20):
            if len(probes) == count:
                break
            probe_socket = socket.socket()
            try:
                probe_socket.bind((host, port))
            except OSError:  # in use: the next
                probe_socket.close()
                continue
            probes.append(probe_socket)
        while len(probes) < count:  # no room below the ephemeral range: any port the host gives
            probe_socket = socket.socket()
            probes.append(probe_socket)
            probe_socket.bind((host, 0))
        return [int(item.getsockname()[1]) for item in probes]
    finally:
        for item in probes:
            item.close()


def _candidates(count: int) -> list[int]:
    """Up to ``count`` random ports from ``FIRST_PORT`` to below the host's ephemeral range (none where unknown)."""
    try:
        with open(EPHEMERAL, encoding="ascii") as file:
            low = int(file.read().split()[0])
    except (OSError, ValueError, IndexError):
        return []
    span = range(FIRST_PORT, low)
    return random.sample(span, min(count, len(span)))


async def start(owner: str, topic: str, env: dict[str, str], dask_worker: Any) -> RankStarted:
    """Start this worker's rank process for ``owner`` (ending one it had: adding a plugin of the same name tears
    the old one down first), and its end of the kernel's cell channel on a plain TCP worker; once it is ready,
    its pid and where the channel listens."""
    from distributed.comm import get_address_host

    keeper = RankKeeper(owner)
    await dask_worker.plugin_add(keeper, name=keeper.name, catch_errors=False)
    env = numbered_devices(with_defaults(torchrun_defaults(env)))
    made = keeper.process = RankProcess(owner, topic, {**env, RANK_ENV: ",".join(sorted(env))}, dask_worker)
    await asyncio.wait_for(made.ready, 60)
    started: RankStarted = {"pid": made.process.pid, "channel": None}
    if str(dask_worker.address).startswith("tcp://"):  # TLS and other comms stay on distributed's
        listener = keeper.listener = Listener(lambda command: ask(owner, command, dask_worker))
        host = get_address_host(dask_worker.address)
        started["channel"] = (host, await listener.open(host), listener.token)
    return started


async def ask(owner: str, message: Command, dask_worker: Any) -> Reply:
    """Hand the rank one message (a cell, values, an init) and return its reply."""
    made = _kept(dask_worker, owner)
    if made is None or not made.alive:  # it ended before this message: the message did not run
        said = ended_reply(None if made is None else made.process.poll(), oom=False, before=True)
        return {**said, "lines": [], "line_count": 0}
    return await made.ask(message)


async def where(owner: str, dask_worker: Any) -> Where:
    made = _kept(dask_worker, owner)
    return {"text": "no rank"} if made is None else await made.where()


async def abort(owner: str, dask_worker: Any) -> bool:
    """Abort the rank's process group, so that no rank stays in one of its collectives; whether it had one."""
    made = _kept(dask_worker, owner)
    if made is None:
        return False
    answer = await made.question("abort")
    return answer is not None and answer["op"] == "abort" and answer["aborted"]


async def stop(owner: str, grace: float, cell: str, dask_worker: Any) -> bool:
    """Interrupt the rank's ``cell`` (which never runs where its message comes later); whether its process had to
    be ended."""
    made = _kept(dask_worker, owner)
    if made is None:
        return False
    ended = await made.stop(grace, cell)
    keeper = _keeper(dask_worker, owner)
    if ended and keeper is not None:
        keeper.process = None  # ended already
        await _release(dask_worker, owner)
    return ended


async def end(owner: str, dask_worker: Any) -> bool:
    """End ``owner``'s rank process here (its plugin removed); whether there was one."""
    return await _release(dask_worker, owner)


def rank_pids(dask_worker: Any) -> dict[str, int]:
    """Owner -> pid of the live rank processes here (for tests and ``%gpucluster status``)."""
    kept = [plugin.process for plugin in dask_worker.plugins.values() if isinstance(plugin, RankKeeper)]
    return {made.owner: made.process.pid for made in kept if made is not None and made.alive}
