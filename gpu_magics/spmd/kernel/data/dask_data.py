"""A persisted dask array pushed to the ranks (``spmd.push(x=x)``): the ranks get a ``DaskShards`` handle, not the
data, and each rank fetches the chunks its own worker holds (``spmd.shards(x)`` in the rank).

The handle is made here from what the scheduler knows (which workers hold each chunk, ``Client.who_has``, and its
size, ``Client.nbytes``): each chunk goes to a rank whose worker holds it, and where that leaves the ranks' shares
uneven, the fewest bytes move to even them out (``chunk_plan``). A chunk moves as a copy made on the receiving
worker (a task restricted to that worker), which this kernel keeps, with the array's own chunks, for as long as
the ranks may fetch them: until the same name is pushed again. The push says in one line how many bytes moved.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gpu_magics.spmd.kernel.data import chunk_plan
from gpu_magics.spmd.rank.shards import Chunk, DaskShards
from gpu_magics.text.errors import LineError, RankError
from gpu_magics.text.units import format_bytes

if TYPE_CHECKING:
    from distributed import Client, Future

    from gpu_magics.spmd.kernel.world import Rank

WAIT_S = 300.0  # how long a push waits for the persisted chunks still computing, and for the moves
COPY_PREFIX = "gpu-magics-shard-"


@dataclass
class _Held:
    """What this kernel keeps for one pushed name: the array's chunks, and the copies its push made."""

    futures: list[Future]
    copies: dict[tuple[Any, Any], Future]  # (original key, copy key) -> the copy


_held: dict[tuple[str, str], _Held] = {}  # (client id, name) -> the chunks the ranks may fetch


def is_collection(value: Any) -> bool:
    """Whether ``value`` is a dask collection (checked only where dask is imported already)."""
    if "dask" not in sys.modules:
        return False
    import dask

    return bool(dask.is_dask_collection(value))


def check(name: str, value: Any) -> None:
    """A one-line ``LineError`` for a dask collection that cannot go to the ranks as shards: not an array, or not
    persisted (its chunks are not in the cluster's memory)."""
    import dask.array

    if not isinstance(value, dask.array.Array):
        raise LineError(
            f"spmd.push: {name} is a dask {type(value).__name__}; only a persisted dask array goes to the ranks as "
            f"shards (push {name}.compute() to send its value)"
        )
    if _missing(value):
        raise LineError(
            f"spmd.push: {name} is a dask array that is not persisted (its chunks are not in the cluster's memory); "
            f"call {name} = {name}.persist() first, then push it"
        )


def _keys(value: Any) -> list[Any]:
    from dask.core import flatten

    return list(flatten(value.__dask_keys__()))


def _futures(value: Any) -> dict[Any, Future]:
    from distributed import futures_of

    return {future.key: future for future in futures_of(value)}


def _missing(value: Any) -> bool:
    keys, futures = _keys(value), _futures(value)
    return not keys or any(key not in futures for key in keys)


def share(name: str, value: Any, client: Client, ranks: Sequence[Rank]) -> tuple[DaskShards, str]:
    """The handle the ranks get for the persisted array ``value`` (checked by ``check``), after the moves that
    balance it over ``ranks``; and the line that says what moved. A chunk copied to a worker by an earlier push
    that is kept still counts as held there: pushed again, nothing moves twice."""
    from dask.array.core import slices_from_chunks

    keys = _keys(value)
    by_key = _futures(value)
    futures = [by_key[key] for key in keys]
    _wait(name, futures, "chunks")
    who_has = client.who_has(futures)
    sizes = client.nbytes(keys, summary=False)
    workers = [rank.member.address for rank in ranks]
    kept = _kept_copies(client)
    holders = [{*who_has.get(key, ()), *(target for target in workers if (key, target) in kept)} for key in keys]
    made = chunk_plan.plan([int(sizes.get(key, 0)) for key in keys], holders, workers)
    copies = _move(client, futures, made.moves)
    _wait(name, list(copies.values()), "moved chunks")
    for index, key in enumerate(keys):  # a chunk its rank's worker holds only as a copy kept from before
        target = workers[made.owners[index]]
        if index not in copies and target not in who_has.get(key, ()):
            copies[index] = kept[(key, target)]
    _held[(str(client.id), name)] = _Held(futures, {(keys[i], copy.key): copy for i, copy in copies.items()})
    places = slices_from_chunks(value.chunks)
    chunks = tuple(
        Chunk(
            key=copies[index].key if index in copies else key,
            index=tuple(places[index]),
            rank=ranks[made.owners[index]].rank,
            nbytes=int(sizes.get(key, 0)),
        )
        for index, key in enumerate(keys)
    )
    meta = type(getattr(value, "_meta", None))
    handle = DaskShards(
        name=name,
        shape=tuple(int(size) for size in value.shape),
        dtype=str(value.dtype),
        chunk_type=f"{meta.__module__.split('.')[0]}.{meta.__name__}",
        chunks=chunks,
        workers=tuple((rank.rank, rank.member.address) for rank in ranks),
    )
    return handle, _line(name, handle, made, ranks)


def _kept_copies(client: Client) -> dict[tuple[Any, str], Future]:
    """(original key, worker) -> a copy of that chunk there that this kernel keeps for an earlier push."""
    found: dict[tuple[Any, str], Future] = {}
    client_id = str(client.id)
    targets: dict[Any, tuple[Any, Future]] = {}
    for (owner, _), held in _held.items():
        if owner != client_id:
            continue
        for (key, copy_key), copy in held.copies.items():
            if copy.status == "finished":
                targets[copy_key] = (key, copy)
    if not targets:
        return found
    where = client.who_has([copy for _, copy in targets.values()])
    for copy_key, (key, copy) in targets.items():
        for address in where.get(copy_key, ()):
            found[(key, address)] = copy
    return found


def release(client: Client, names: Sequence[str]) -> None:
    """Let go of the chunks kept for ``names`` (pushed again: the ranks' old handles are replaced), and of those
    kept on another cluster (its ranks are ended when the cluster in use changes)."""
    for key in [key for key in _held if key[0] != str(client.id) or key[1] in names]:
        del _held[key]


def _wait(name: str, futures: list[Future], what: str) -> None:
    """Wait for ``futures``; a one-line ``LineError`` where one failed, was lost, or is not done in time."""
    from distributed import wait

    if not futures:
        return
    try:
        wait(futures, timeout=WAIT_S)
    except TimeoutError:
        raise RankError(
            f"spmd.push: {name}'s {what} were not all in the cluster's memory after {WAIT_S:.0f} s; nothing was "
            "pushed (push again when its persist() is done)"
        ) from None
    bad = [future for future in futures if future.status != "finished"]
    if bad:
        status = bad[0].status
        cause = ""
        if status == "error":
            error = bad[0].exception()
            cause = f": {type(error).__name__}: {error}"
        raise RankError(
            f"spmd.push: {len(bad)} of {name}'s {what} are {'lost' if status == 'lost' else status}{cause}; "
            f"nothing was pushed (persist {name} again)"
        )


def _move(client: Client, futures: list[Future], moves: Sequence[chunk_plan.Move]) -> dict[int, Future]:
    """A copy of each moved chunk made on its target worker only (chunk index -> the copy's future)."""
    from dask.base import tokenize
    from toolz import identity

    return {
        move.index: client.submit(
            identity,
            futures[move.index],
            key=f"{COPY_PREFIX}{tokenize(futures[move.index].key, move.target)}",
            workers=[move.target],
            allow_other_workers=False,
            pure=False,
        )
        for move in moves
    }


def _line(name: str, handle: DaskShards, made: chunk_plan.Plan, ranks: Sequence[Rank]) -> str:
    """``spmd.push: x: 8 chunks (6.1 MiB) over ranks 0-1 (4 + 4 chunks), ...; 3.1 MiB (4 chunks) moved ...``."""
    from gpu_magics.spmd.kernel.view.output import rank_list

    counts = " + ".join(str(count) for count in made.counts())
    where = f"rank{'s' * (len(ranks) != 1)} {rank_list([rank.rank for rank in ranks])} ({counts} chunks)"
    if made.moves:
        many = len(made.moves) != 1
        moved = (
            f"{format_bytes(made.moved_bytes)} ({made.moved_bytes} bytes, {len(made.moves)} chunk{'s' * many}) "
            "moved between workers to balance them"
        )
    else:
        moved = "0 bytes moved"
    return (
        f"spmd.push: {name}: {len(handle.chunks)} chunks ({format_bytes(handle.nbytes)}) over {where}, each from "
        f"its rank's own worker with spmd.shards({name}); {moved}"
    )
