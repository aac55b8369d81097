"""The cell channel: commands for a rank go from the kernel straight to its worker's rank host over one TCP
connection, and the replies come back on it; both ends are here.

A cell is the hot path: through ``Client.run`` each rank's command costs a round of distributed's RPC (the
connection pool, the function pickled and loaded, msgpack framing), about 1 ms per rank on the kernel's event
loop, one rank after the other. On this channel a command is one length-prefixed pickle each way.

- The worker end (``Listener``) is opened by the rank host when the rank starts, bound to the worker's own
  address (the same interface its Dask port listens on), on a free port; it answers with ``host.ask``.
- The first frame of a connection must be the listener's token (32 random bytes, handed to the kernel with the
  rank's start through the cluster's ``Client``): anything else closes the connection before a byte is unpickled.
- Only plain ``tcp://`` clusters use it (TLS stays on distributed's comms); where the kernel cannot reach the
  worker (a gateway's proxy) the kernel keeps to ``Client.run``.

Frames: 8 bytes of length (big-endian), then the payload: the token, or a pickled ``(id, message)``.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import pickle
import secrets
import struct
from collections.abc import Awaitable, Callable
from typing import Any

HEADER = struct.Struct("!Q")
TOKEN_BYTES = 32
CONNECT_TIMEOUT_S = 2.0
TOKEN_WAIT_S = 10.0  # a connection that sends no token in this time is closed


def frame(payload: bytes) -> bytes:
    return HEADER.pack(len(payload)) + payload


async def read_frame(reader: asyncio.StreamReader) -> bytes:
    (size,) = HEADER.unpack(await reader.readexactly(HEADER.size))
    return await reader.readexactly(size)


# -- the worker end ------------------------------------------------------------------------------------------------
class Listener:
    """One rank's end of the channel in its worker: answers each command with ``answer(command)``."""

    def __init__(self, answer: Callable[[Any], Awaitable[Any]]) -> None:
        self.answer = answer
        self.token = secrets.token_bytes(TOKEN_BYTES)
        self.port = 0
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._writers: set[asyncio.StreamWriter] = set()

    async def open(self, host: str) -> int:
        """Listen on ``host`` (the worker's own address), on a free port; the port."""
        self._server = await asyncio.start_server(self._serve, host, 0)
        self.port = int(self._server.sockets[0].getsockname()[1])
        return self.port

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        try:
            if not await self._admitted(reader):
                return  # not the kernel that started the rank: nothing is read further
            while True:
                ident, command = pickle.loads(await read_frame(reader))
                task = asyncio.create_task(self._answer(ident, command, writer))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
        except (asyncio.IncompleteReadError, ConnectionError):
            return  # the kernel went away or closed the channel
        finally:
            self._writers.discard(writer)
            writer.close()

    async def _admitted(self, reader: asyncio.StreamReader) -> bool:
        """Whether the connection's first frame, within ``TOKEN_WAIT_S``, is the token."""
        try:
            async with asyncio.timeout(TOKEN_WAIT_S):
                (size,) = HEADER.unpack(await reader.readexactly(HEADER.size))
                return size == TOKEN_BYTES and hmac.compare_digest(await reader.readexactly(size), self.token)
        except TimeoutError:
            return False

    async def _answer(self, ident: int, command: Any, writer: asyncio.StreamWriter) -> None:
        try:
            reply: Any = await self.answer(command)
        except Exception as error:  # the host's failure, of any kind, is this command's answer, as Client.run gives
            reply = error
        try:
            payload = pickle.dumps((ident, reply), protocol=5)
        except Exception as error:  # a reply that does not pickle: said in its place
            payload = pickle.dumps((ident, RuntimeError(f"the rank's reply did not pickle: {error!r}")), protocol=5)
        with contextlib.suppress(ConnectionError):
            writer.write(frame(payload))
            await writer.drain()

    async def close(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.close()  # no new connections; those made are closed here (the server leaves them open)
            if self._tasks:  # answers under way (a rank ended says so to its pending commands) go out first
                await asyncio.wait(list(self._tasks), timeout=2.0)
            for writer in list(self._writers):
                writer.close()
            for task in list(self._tasks):
                task.cancel()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(server.wait_closed(), 1.0)


# -- the kernel end ------------------------------------------------------------------------------------------------
class Caller:
    """The kernel's connection to one rank's listener: commands out, replies matched back by id. Runs on the
    client's event loop."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self._ids = 0
        self._waiting: dict[int, asyncio.Future[Any]] = {}
        self.broken: BaseException | None = None
        self._reading = asyncio.get_running_loop().create_task(self._read())

    @classmethod
    async def connect(cls, host: str, port: int, token: bytes) -> Caller:
        reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), CONNECT_TIMEOUT_S)
        writer.write(frame(token))
        await writer.drain()
        return cls(reader, writer)

    async def ask(self, command: Any) -> Any:
        """Send ``command``; its reply (an exception where the host failed to answer)."""
        if self.broken is not None:
            raise ConnectionError(f"the channel to the rank's worker closed ({self.broken!r})")
        self._ids += 1
        ident = self._ids
        future = asyncio.get_running_loop().create_future()
        self._waiting[ident] = future
        try:
            self.writer.write(frame(pickle.dumps((ident, command), protocol=5)))
            await self.writer.drain()
            return await future
        finally:
            self._waiting.pop(ident, None)

    async def _read(self) -> None:
        try:
            while True:
                ident, reply = pickle.loads(await read_frame(self.reader))
                future = self._waiting.pop(ident, None)
                if future is not None and not future.done():
                    future.set_result(reply)
        except (asyncio.IncompleteReadError, ConnectionError, OSError) as error:
            self.broken = error
        except asyncio.CancelledError:
            self.broken = ConnectionAbortedError("closed by the kernel")
        for future in self._waiting.values():
            if not future.done():
                future.set_exception(ConnectionError(f"the rank's worker closed the channel ({self.broken!r})"))
        self._waiting.clear()

    def close(self) -> None:
        self._reading.cancel()
        self.writer.close()


async def connect_all(endpoints: dict[str, tuple[str, int, bytes]]) -> dict[str, Caller]:
    """A connection to each worker address's listener (host, port, token), made at once; one that cannot be made
    is left out (the kernel keeps to ``Client.run`` for that rank)."""
    addresses = list(endpoints)
    made = await asyncio.gather(*(Caller.connect(*endpoints[address]) for address in addresses), return_exceptions=True)
    return {address: caller for address, caller in zip(addresses, made, strict=True) if isinstance(caller, Caller)}
