"""This kernel's ranks on the cluster in use: the world, the rank processes and the process groups (the calls
that reach them are ``rank_calls``, through the cluster's ``Client``, never the cluster engine's internals).

The world is made on the first SPMD cell and kept while the cluster's workers stay the same; a worker that
joins, leaves or restarts makes a new world (new rank processes, new ports) at the next cell, said in one line.
The process groups (``--init torch``, ``--init jax``) are made once per world and kept. ``reset`` ends the rank
processes; ``%gpucluster stop`` and a kernel that leaves end them too.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import os
import threading
import uuid
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, cast

from gpu_magics.arrays.caps import allocators, notebook
from gpu_magics.cluster.control import queries
from gpu_magics.spmd.kernel.rank_calls import RankCalls
from gpu_magics.spmd.kernel.rank_parking import RankPark
from gpu_magics.spmd.kernel.view import results
from gpu_magics.spmd.kernel.world import PROG, USER_SET, Member, Rank, World, check_gpus, order
from gpu_magics.spmd.messages import Event, ExitedEvent, Line, LinesEvent
from gpu_magics.spmd.worker import host
from gpu_magics.text.errors import ClusterError, RankError
from gpu_magics.text.units import dropped

if TYPE_CHECKING:
    from distributed import Client

START_TIMEOUT_S = 90.0
STOP_GRACE_S = 3.0  # seconds a rank has to stop after an interrupt before its process is ended
LineHandler = Callable[[int, str | None, list[Line], dict[str, str]], None]  # rank, cell, lines, live progress


class Ranks(RankCalls):
    """The ranks of one kernel (one client) on the cluster in use."""

    def __init__(self, client: Client) -> None:
        super().__init__(client)
        self.topic = f"gpu-magics-spmd-{self.owner}"
        self.world: World | None = None
        self.groups: set[str] = set()
        self.regroup: list[str] = []  # groups the last world had, made again at the next cell
        self.remake: list[str] = []  # groups aborted or out of step after a cell, made again in the same processes
        self.cells = 0
        self.busy = False  # an SPMD cell runs on them now
        self._lost: dict[int, str] = {}  # rank -> how its process ended by itself (its host's event)
        self.pids: dict[int, int] = {}  # rank -> its process id, in the world running now
        self._why_new: str | None = None  # why the world was ended, said when the next one starts
        self._line_handler: LineHandler | None = None
        self._lock = threading.Lock()
        client.subscribe_topic(self.topic, self._on_event)
        self._watched = False

    # -- output events ------------------------------------------------------------------------------------------
    def listen(self, handler: LineHandler | None) -> None:
        """Send the ranks' live output to ``handler(rank, cell, lines, progress)`` (``None``: drop it)."""
        with self._lock:
            self._line_handler = handler

    def _on_event(self, event: tuple[float, Event]) -> None:
        _, message = event
        if not isinstance(message, dict):
            return
        with self._lock:
            handler = self._line_handler
            if "exited" in message:  # a rank process ended by itself: the next cell starts a new world
                exited = cast(ExitedEvent, message)
                if self.pids.get(exited["rank"]) == exited["pid"]:  # this world's, not an old one's
                    self._lost.setdefault(exited["rank"], results.exit_words(exited["exited"], exited["oom"]))
                return
            lines = cast(LinesEvent, message)
        if handler is not None:
            handler(lines["rank"], lines["cell"], list(lines["lines"]), dict(lines.get("progress") or {}))

    # -- the world ----------------------------------------------------------------------------------------------
    def prepare_for_cell(self, *, cell: bool = True) -> tuple[World, list[str]]:
        """The world for the cluster's workers now. While the client's own view of the workers (refreshed every
        few seconds) matches the running world, no round trip is made; otherwise the scheduler is asked. A world
        that lost a rank process is ended first (a process group cannot lose a member): all ranks start again.
        ``cell``: a cell follows at once, which makes the last world's groups again (``push``/``pull``: not)."""
        from gpu_magics.cluster.control import queries
        from gpu_magics.cluster.reading import inspection

        with self._lock:
            lost, self._lost = self._lost, {}
        if lost and self.world is not None:
            rank, how = min(lost.items())
            self.lose(rank, how)

        cached = getattr(self.client, "_scheduler_identity", None) or {}
        known = set((cached.get("workers") or {}).keys())
        if self.world is not None and known == self.world.addresses:
            return self.world, []
        workers = inspection.scheduler_workers(self.client)
        if self.world is not None and set(workers) == self.world.addresses:
            return self.world, []
        # CPU workers (``--cpu-workers`` too) give ranks that see no GPU even where the host has some; otherwise each
        # worker says whether it has a GPU (its ``CUDA_VISIBLE_DEVICES``)
        return self.prepare(workers, cpu_only=queries.cpu_workers_asked(), cell=cell)

    def prepare(
        self, workers: dict[str, dict[str, Any]], *, cpu_only: bool = False, cell: bool = True
    ) -> tuple[World, list[str]]:
        """The world for ``workers`` (the one running when they did not change), with rank processes started;
        and the lines to say (a new world, why the old one went)."""
        notes: list[str] = []
        if not workers:
            raise ClusterError(f"{PROG}: the cluster has no workers; add some with %gpucluster scale N")
        if self.world is not None and self.world.addresses == set(workers):
            return self.world, notes
        if self.world is not None:
            old, new = self.world.addresses, set(workers)
            self._end_for_new(f"the cluster's workers changed (+{len(new - old)}, -{len(old - new)})")
        if self._why_new is not None:
            notes.append(self._new_world_line(self._why_new, cell))
            self._why_new = None
        probes = self.call_wait(host.probe, workers=list(workers), timeout=30)
        members = []
        for address, found in probes.items():
            if isinstance(found, BaseException):
                raise RankError(f"{PROG}: worker {address} did not answer ({type(found).__name__}: {found})")
            members.append(Member.from_probe(address, found, gpu=not cpu_only))
        ranks = order(members)
        check_gpus(ranks)
        first = ranks[0].member.address
        ports = self.call_wait(host.free_ports, 2, workers=[first], timeout=10)[first]
        if isinstance(ports, BaseException):
            raise RankError(f"{PROG}: rank 0's worker could not find a free port ({ports})")
        chosen = tuple((name, os.environ[name]) for name in USER_SET if name in os.environ)
        made = World(ranks, int(ports[0]), int(ports[1]), chosen, run_id=f"gpu-magics-{uuid.uuid4().hex[:12]}")
        self._start(made)
        self.world = made
        self.groups = set()
        return made, notes

    def _new_world_line(self, why: str, cell: bool) -> str:
        """The one line a new world after a lost one says: why, that variables are gone, the groups made again."""
        groups = " ".join(f"--init {kind}" for kind in self.regroup)
        again = ""
        if groups:
            when = "now" if cell else "at the next SPMD cell"
            again = f"; the process group is made again as before, {when} ({groups})"
        return f"{PROG}: {why}: every rank starts anew (its variables are gone){again}"

    def _end_for_new(self, why: str) -> None:
        """End the world for a new one at the next cell, which says ``why`` and makes its groups again."""
        kinds = sorted(self.groups) + [kind for kind in self.regroup if kind not in self.groups]
        self.end()
        self.regroup, self._why_new = kinds, why

    def lose(self, rank: int, how: str) -> None:
        """``rank``'s process ended by itself (``how``: its exit code or signal): every rank starts again at the
        next cell."""
        if self.world is not None:
            self._end_for_new(f"rank {rank}'s process ended ({how})")

    def group_made(self, kind: str) -> None:
        self.groups.add(kind)
        for waiting in (self.regroup, self.remake):
            if kind in waiting:
                waiting.remove(kind)

    def _start(self, made: World) -> None:
        if not self._watched:
            from gpu_magics.spmd.kernel import leaving

            leaving.watch(self.client, self.owner)
            self._watched = True
        notebook.ranks_joined(rank.member.gpu_uuid or "" for rank in made.ranks if rank.gpu)
        futures = {
            rank.rank: self.call(
                host.start, self.owner, self.topic, capped_env(made, rank), workers=[rank.member.address]
            )
            for rank in made.ranks
        }
        failed = []
        pids: dict[int, int] = {}
        endpoints: dict[str, tuple[str, int, bytes]] = {}
        addresses = {rank.rank: rank.member.address for rank in made.ranks}
        for index, future in futures.items():
            try:
                result = next(iter(future.result(START_TIMEOUT_S).values()))
            except Exception as error:  # a start's failure, of any kind, is said for its rank
                result = error
            if isinstance(result, BaseException):
                failed.append(f"rank {index}: {type(result).__name__}: {result}")
                continue
            pids[index] = int(result["pid"])
            if result["channel"] is not None and self._direct:
                endpoints[addresses[index]] = result["channel"]
        if failed:
            self.world = made
            self.end()
            raise RankError(f"{PROG}: the rank processes did not start ({'; '.join(failed[:3])})")
        with self._lock:
            self.pids = pids
        self._connect(endpoints)

    def end(self) -> None:
        """End every rank process of this kernel (their variables and groups go with them)."""
        made, self.world = self.world, None
        self.groups = set()
        notebook.ranks_left()
        self.regroup, self.remake, self._why_new = [], [], None
        with self._lock:
            self._lost, self.pids = {}, {}
        self._close_callers()
        if made is None or self.client.status != "running":
            return
        try:
            self.call_wait(host.end, self.owner, workers=sorted(made.addresses), timeout=15)
        except Exception as error:  # an end that fails any way: the ranks also end with their workers
            dropped("ending the rank processes", error)

    def stop(self, ranks: Sequence[Rank], cell: str, grace: float = STOP_GRACE_S) -> concurrent.futures.Future[Any]:
        """Interrupt ``ranks``' ``cell`` (never run where its message comes after the stop); their processes end
        where they do not stop within ``grace`` seconds."""
        return self.call(host.stop, self.owner, grace, cell, workers=[rank.member.address for rank in ranks])

    def where_all(self) -> concurrent.futures.Future[Any]:
        """Every rank's answer to "where are you" (its process group's state with it): address -> answer."""
        assert self.world is not None
        return self.call(host.where, self.owner, workers=sorted(self.world.addresses))

    def abort_groups(self) -> concurrent.futures.Future[Any]:
        """Abort every rank's process group, so that a rank waiting in a collective answers the interrupt."""
        assert self.world is not None
        return self.call(host.abort, self.owner, workers=sorted(self.world.addresses))

    def check_groups(self, stopped: bool) -> str | None:
        """After a failed or interrupted cell in which every rank answered: whether the torch group is still in
        step (no rank was stopped, where a collective may have been cut short; none aborted it; every rank
        entered as many collectives). Where it is not, it is made again in the same processes at the next cell,
        and the line that says so is returned."""
        if self.world is None or "torch" not in self.groups:
            return None
        try:
            answers = self.call_wait(host.where, self.owner, workers=sorted(self.world.addresses), timeout=5)
        except concurrent.futures.TimeoutError:
            answers = {}
        states = [answer.get("collective") if isinstance(answer, dict) else None for answer in answers.values()]
        counts = {state.get("seq") for state in states if state}
        aborted = any((state or {}).get("aborted") for state in states)
        if not stopped and len(answers) == self.world.size and not aborted and len(counts) <= 1 and all(states):
            return None
        if "torch" not in self.remake:
            self.remake.append("torch")
        return (
            "the torch.distributed group may be out of step (a rank was stopped): the next SPMD cell makes it again "
            "in the same processes, variables kept"
        )

    def remake_port(self) -> dict[str, str]:
        """A new ``MASTER_PORT`` for a group made again in the same processes (the old one may stay bound)."""
        assert self.world is not None
        first = self.world.ranks[0].member.address
        ports = self.call_wait(host.free_ports, 1, workers=[first], timeout=10)[first]
        if isinstance(ports, BaseException):
            raise RankError(f"{PROG}: rank 0's worker could not find a free port ({ports})")
        return {"MASTER_PORT": str(ports[0])}

    def forget_ended(self, ended: Sequence[int], died: dict[int, str] | None = None) -> None:
        """Ranks whose process was ended after a failure or an interrupt (``ended``), or ended by itself during the
        cell (``died``, rank -> how): the world is made again at the next cell, its groups too."""
        if self.world is None:
            return
        if died:
            rank = min(died)
            self._end_for_new(f"rank {rank}'s process ended in the last cell ({died[rank]})")
        elif ended:
            many = len(ended) > 1
            self._end_for_new(
                f"rank{'s' * many} {', '.join(map(str, ended))} {'were' if many else 'was'} ended after the last cell"
            )

    def close(self) -> None:
        from distributed.client import ClosedClientError

        self.end()
        with contextlib.suppress(ValueError, RuntimeError, ClosedClientError):  # not subscribed; the client closed
            self.client.unsubscribe_topic(self.topic)


_by_client: dict[str, Ranks] = {}
_listening: list[Callable[[], None]] = []


def capped_env(made: World, rank: Rank) -> dict[str, str]:
    """``rank``'s environment, with its share of the notebook's memory cap where one binds on its GPU (a lower JAX
    fraction the user chose stays)."""
    env = made.env(rank)
    found = notebook.rank_share(rank.member.gpu_uuid or "") if rank.gpu else None
    if found is None:
        return env
    added = allocators.share_env(*found)
    chosen = env.get(allocators.JAX_ENV)
    if chosen is not None and _below(chosen, added[allocators.JAX_ENV]):
        added.pop(allocators.JAX_ENV)
    return {**env, **added}


def _below(chosen: str, share: str) -> bool:
    try:
        return float(chosen) <= float(share)
    except ValueError:
        return False


def _cluster_changed(cluster: Any) -> None:
    """The cluster in use changed (stopped, replaced, detached): end the ranks on the others while their clients
    still answer."""
    keep = None if cluster is None else str(cluster.client.id)
    for key in [key for key in _by_client if key != keep]:
        _by_client.pop(key).close()


def for_client(client: Client) -> Ranks:
    """This kernel's ranks on ``client``'s cluster (made on first use)."""
    if not _listening:
        from gpu_magics.cluster.control import queries

        _listening.append(queries.on_change(_cluster_changed))
    key = str(client.id)
    found = _by_client.get(key)
    if found is None:
        found = _by_client[key] = Ranks(client)
    return found


def current() -> Ranks | None:
    """The ranks on the cluster in use, if any were made."""
    from gpu_magics.cluster.control import queries

    client = queries.active_client()
    return None if client is None else _by_client.get(str(client.id))


def _rank_park() -> RankPark | None:
    made = current()
    return None if made is None else RankPark(made)


queries.ranks_take_part_in_parks(_rank_park)  # a park takes the ranks too, needing nothing of this side


def end_all() -> None:
    """End every rank process this kernel started (the cluster changed or the extension unloads)."""
    for key in list(_by_client):
        made = _by_client.pop(key)
        made.close()
    while _listening:
        _listening.pop()()


def world_now() -> tuple[int, str] | None:
    """How many ranks the next SPMD cell would have, and the world in words, without starting any (``None``
    where no cluster answers yet, or its start is still under way)."""
    from gpu_magics.cluster.control import queries

    if queries.start_under_way() is not None:
        return None
    found = current()
    if found is not None and found.world is not None:
        return found.world.size, found.world.describe()
    count = queries.worker_count()
    if not count:
        return None
    return count, f"{count} rank{'s' * (count != 1)}, one per worker of the cluster"


def where_cells_run(ranks: Sequence[int] | None, shown: Sequence[int] | None = None) -> str:
    """Where ``%gpurun spmd``'s cells run, in words (``every rank (2 ranks on 1 host (CPU))``, ``rank 1 of 2``); a
    one-line ``RankError`` for ``--ranks`` or ``--output`` (``shown``) outside the world, where the world is
    known now."""
    from gpu_magics.spmd.kernel.view.output import rank_list
    from gpu_magics.spmd.kernel.world import check_ranks

    found = world_now()
    if found is not None and shown is not None:
        check_ranks(shown, found[0], "%gpurun spmd --output", found[1])
    if ranks is None:
        return f"every rank ({found[1] if found else 'one per worker of the cluster'})"
    if found is not None:
        check_ranks(ranks, found[0], "%gpurun spmd --ranks", found[1])
    named = f"rank{'s' * (len(ranks) != 1)} {rank_list(ranks)}"
    return named + (f" of {found[0]}" if found else "")
