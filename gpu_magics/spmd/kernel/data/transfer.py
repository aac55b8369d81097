"""Moving values between the kernel and the ranks, one call each:

- ``gpu_magics.spmd.push(config=cfg, data=x)`` sets ``config`` and ``data`` on every rank (``ranks=[0]``: some);
- ``gpu_magics.spmd.push(x=x)`` with a persisted dask array ``x`` sends a handle to its chunks, not the data:
  ``gpu_magics.spmd.shards(x)`` in a rank fetches the chunks its own worker holds (``dask_data``);
- ``gpu_magics.spmd.pull("loss")`` brings one variable back from every rank (a list in rank order), and
  ``pull("loss", rank=0)`` from one rank.

Values travel pickled (cloudpickle: functions and classes made in the notebook too). A value that does not load
in the kernel (a CUDA tensor where the kernel has no GPU) comes back as its repr.
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import Sequence
from typing import Any

from gpu_magics.spmd.kernel.view.results import load_value
from gpu_magics.spmd.messages import PullCommand, PushCommand, Reply
from gpu_magics.text.errors import LineError, RankError, said_in_one_line

TIMEOUT_S = 300.0


def _ranks_ready(ranks: Sequence[int] | None, said: str) -> tuple[Any, tuple[Any, ...]]:
    """The ranks to reach (every rank without ``ranks``); ``said`` begins the line about a rank outside the world."""
    from gpu_magics.cluster.control import queries
    from gpu_magics.spmd.kernel.ranks import for_client

    made = for_client(queries.require_client())
    queries.direct_work_ahead()  # parked ranks come back first
    world, notes = made.prepare_for_cell(cell=False)
    for note in notes:
        print(note)
    return made, world.select(None if ranks is None else list(ranks), said)


def _rank_list(ranks: Any) -> list[int] | None:
    """``push``'s ``ranks`` as a list of rank numbers; a one-line ``LineError`` naming the argument where it is
    not."""
    if ranks is None:
        return None
    items = [ranks] if isinstance(ranks, int) else ranks
    try:
        found = list(items)
    except TypeError:
        found = [None]
    if not found or not all(isinstance(item, int) and not isinstance(item, bool) for item in found):
        raise LineError(f"spmd.push: ranks={ranks!r} is not a rank number or a list of them, for example ranks=[0]")
    return found


def _gather(futures: dict[int, concurrent.futures.Future[Any]], what: str) -> dict[int, Reply]:
    replies: dict[int, Reply] = {}
    for index, future in futures.items():
        reply: Reply | BaseException = next(iter(future.result(TIMEOUT_S).values()))
        if isinstance(reply, BaseException):
            raise RankError(f"spmd.{what}: rank {index}'s worker did not answer ({type(reply).__name__}: {reply})")
        if not reply.get("ok"):
            error = reply.get("error")
            detail = f"{error.get('type')}: {error.get('message')}" if error else "its process ended"
            raise RankError(f"spmd.{what}: rank {index}: {detail}")
        replies[index] = reply
    return replies


@said_in_one_line
def push(ranks: Sequence[int] | None = None, **values: Any) -> None:
    """Set each keyword as a variable on every rank (``ranks``: only those)."""
    if not values:
        raise LineError("spmd.push: name the values, for example spmd.push(config=config)")
    import cloudpickle

    from gpu_magics.spmd.kernel.data import dask_data

    arrays = {name: value for name, value in values.items() if dask_data.is_collection(value)}
    for name, value in arrays.items():
        dask_data.check(name, value)  # a persisted dask array goes as a handle to its chunks (spmd.shards)
    try:
        packed = {name: cloudpickle.dumps(value, protocol=5) for name, value in values.items() if name not in arrays}
    except Exception as error:  # a value may fail to pickle any way: said in one line
        raise RankError(f"spmd.push: a value does not pickle ({type(error).__name__}: {error})") from None
    wanted = _rank_list(ranks)
    made, chosen = _ranks_ready(wanted, f"spmd.push(ranks={ranks!r})")
    dask_data.release(made.client, [name for name in values if name not in arrays])  # a handle pushed before
    for name, value in arrays.items():
        handle, line = dask_data.share(name, value, made.client, chosen)
        print(line)
        packed[name] = cloudpickle.dumps(handle, protocol=5)
    command: PushCommand = {"op": "push", "values": packed}
    _gather(made.ask_each(chosen, command), "push")


@said_in_one_line
def pull(name: str, rank: int | None = None) -> Any:
    """The variable ``name`` from ``rank``, or from every rank (a list in rank order) without one."""
    if not isinstance(name, str) or not name.isidentifier():
        raise LineError(f"spmd.pull: name={name!r} is not a variable name; for example spmd.pull('loss')")
    if rank is not None and (not isinstance(rank, int) or isinstance(rank, bool)):
        raise LineError(f"spmd.pull: rank={rank!r} is not a rank number; for example spmd.pull({name!r}, rank=0)")
    made, chosen = _ranks_ready(None if rank is None else [rank], f"spmd.pull({name!r}, rank={rank})")
    command: PullCommand = {"op": "pull", "names": [name]}
    replies = _gather(made.ask_each(chosen, command), "pull")
    values = [load_value(index, *replies[index].get("values", {})[name]) for index in sorted(replies)]
    return values[0] if rank is not None else values
