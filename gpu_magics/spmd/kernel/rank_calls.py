"""How the kernel reaches its ranks' workers (``RankCalls``): a function run on some workers, one worker asked
directly (one hop, as the client fetches results) unless the kernel cannot reach it (a gateway's proxy), several
through the scheduler; and a cell's command handed to every rank at once on its cell channel (``spmd.channel``),
where it has one. Every call goes through the cluster's ``Client``, never through the cluster engine's internals.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from gpu_magics.spmd.channel import Caller, connect_all
from gpu_magics.spmd.kernel.world import Rank
from gpu_magics.spmd.messages import Command
from gpu_magics.spmd.worker import host

if TYPE_CHECKING:
    from distributed import Client


class RankCalls:
    """The calls of one kernel (one client) to the workers of its ranks, and the cell channels of this world."""

    def __init__(self, client: Client) -> None:
        self.client = client
        self.owner = str(client.id)
        self._direct = True
        self._callers: dict[str, Caller] = {}  # worker address -> the cell channel to its rank (this world's)

    def call(self, function: Callable[..., Any], *args: Any, workers: Sequence[str]) -> concurrent.futures.Future[Any]:
        """``function(*args)`` on ``workers`` (each as ``dask_worker``); a future of address -> result or error.
        One worker is asked directly (one hop, as the client fetches results), falling back to the scheduler
        where the kernel cannot reach the worker (a gateway's proxy); several through the scheduler."""
        loop: Any = self.client.loop
        return asyncio.run_coroutine_threadsafe(self._call(function, args, workers), loop.asyncio_loop)

    def _call(self, function: Callable[..., Any], args: tuple[Any, ...], workers: Sequence[str]) -> Any:
        if len(workers) == 1 and self._direct:
            return self._run_direct(function, args, workers[0])
        return self.client._run(function, *args, workers=list(workers), on_error="return")

    def ask_each(self, ranks: Sequence[Rank], message: Command) -> dict[int, concurrent.futures.Future[Any]]:
        """Hand ``message`` to every rank of ``ranks`` at once, each straight to its worker, with one hand-over to
        the client's event loop for all of them (a cell's cost grows little with the ranks); rank -> a future of
        address -> reply, as ``call`` gives."""
        futures: dict[int, concurrent.futures.Future[Any]] = {rank.rank: concurrent.futures.Future() for rank in ranks}

        async def one(rank: Rank) -> None:
            future = futures[rank.rank]
            try:
                result = await self._ask(rank.member.address, message)
            except BaseException as error:  # the call's failure, of any kind, is that rank's answer
                if future.set_running_or_notify_cancel():
                    future.set_exception(error)
                return
            if future.set_running_or_notify_cancel():
                future.set_result(result)

        async def fan_out() -> None:
            await asyncio.gather(*(one(rank) for rank in ranks))

        loop: Any = self.client.loop
        asyncio.run_coroutine_threadsafe(fan_out(), loop.asyncio_loop)
        return futures

    async def _ask(self, address: str, message: Command) -> dict[str, Any]:
        """One rank's command, on its cell channel where it has one (else through ``Client.run``)."""
        caller = self._callers.get(address)
        if caller is None or caller.broken is not None:
            return dict(await self._call(host.ask, (self.owner, message), [address]))
        try:
            return {address: await caller.ask(message)}
        except ConnectionError as error:  # the worker went away mid-command: that rank's answer, as Client.run's
            return {address: error}

    async def _run_direct(self, function: Callable[..., Any], args: tuple[Any, ...], address: str) -> dict[str, Any]:
        from distributed.comm.core import CommClosedError
        from distributed.protocol.pickle import dumps, loads

        try:
            response = await self.client.rpc(address).run(
                function=dumps(function), args=dumps(args), kwargs=dumps({}), wait=True
            )
        except (OSError, CommClosedError):
            self._direct = False  # this kernel does not reach the workers: through the scheduler from now on
            return dict(await self.client._run(function, *args, workers=[address], on_error="return"))
        except Exception as error:  # the worker's failure, of any kind, is that rank's answer
            return {address: error}
        if response.get("status") == "OK":
            return {address: response.get("result")}
        exception = response.get("exception")
        return {address: loads(exception) if isinstance(exception, bytes) else RuntimeError(str(response))}

    def call_wait(self, function: Callable[..., Any], *args: Any, workers: Sequence[str], timeout: float) -> dict:
        future = self.call(function, *args, workers=workers)
        try:
            return dict(future.result(timeout))
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise

    def _connect(self, endpoints: dict[str, tuple[str, int, bytes]]) -> None:
        """Open the cell channel to each rank at ``endpoints`` (worker address -> host, port, token)."""
        loop: Any = self.client.loop
        try:
            self._callers = asyncio.run_coroutine_threadsafe(connect_all(endpoints), loop.asyncio_loop).result(10)
        except concurrent.futures.TimeoutError:  # the channels stay shut: the cells go through Client.run
            self._callers = {}

    def _close_callers(self) -> None:
        callers, self._callers = self._callers, {}
        loop: Any = self.client.loop
        for caller in callers.values():
            with contextlib.suppress(RuntimeError):  # the client's loop closed: its connections went with it
                loop.asyncio_loop.call_soon_threadsafe(caller.close)
