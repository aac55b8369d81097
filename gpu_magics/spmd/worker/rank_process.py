"""One rank process, in its Dask worker: started, fed its commands, read, stopped.

The rank process is a plain child process (``python -m gpu_magics.spmd.rank``), not a daemonic multiprocessing
child, so a ``DataLoader`` with worker processes works in it; it sees the environment the kernel chose for its rank
(``RANK``, ``LOCAL_RANK``, ``CUDA_VISIBLE_DEVICES`` ...). Its stdout and stderr are read line by line here: each
line goes to the kernel at once as an event on the owner's topic (``Worker.log_event``), and the whole of a
cell's output comes back with the cell's reply too, so the kernel misses nothing whichever arrives first.
Stopping a rank asks first (``SIGINT``), then ends the process (``SIGKILL``) when it does not stop in time, as a
rank waiting in a collective that will never complete does not.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from multiprocessing.connection import Connection
from typing import Any, Literal

from gpu_magics.spmd.messages import (
    AbortAnswer,
    Command,
    ExitedEvent,
    Line,
    LinesEvent,
    Question,
    RankSays,
    Reply,
    Where,
    WhereAnswer,
    ended_reply,
    stopped_reply,
)
from gpu_magics.spmd.rank.repl import MARK

LINE_LIMIT = 20_000  # lines of one cell's output kept for its reply (the live events carry every line)
EVENT_GAP = 0.05  # seconds between two output events of one rank (lines in between travel together)


class RankProcess:
    """One rank process and the cell it runs now. Its sockets and pipes are read on the worker's event loop
    (``add_reader``): no thread stands between a rank's reply and the kernel."""

    def __init__(self, owner: str, topic: str, env: dict[str, str], worker: Any) -> None:
        self.owner, self.topic, self.worker = owner, topic, worker
        self.rank = int(env.get("RANK", "0"))
        self.loop = asyncio.get_running_loop()
        pairs = [socket.socketpair() for _ in range(2)]
        self.commands, self.control = (Connection(mine.detach()) for mine, _ in pairs)
        child_fds = [theirs.detach() for _, theirs in pairs]
        self.process = subprocess.Popen(
            [sys.executable, "-u", "-m", "gpu_magics.spmd.rank", *map(str, child_fds)],
            env={**os.environ, **env, "PYTHONUNBUFFERED": "1"},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            pass_fds=tuple(child_fds),
            close_fds=True,
        )
        for fd in child_fds:
            os.close(fd)
        self._replies: dict[int, asyncio.Future[Reply]] = {}
        self._started: set[int | None] = set()  # ids of the messages its REPL took
        self._asked: dict[int, asyncio.Future[WhereAnswer | AbortAnswer]] = {}  # control questions not answered yet
        self._lines: list[Line] = []  # the lines of the cell running now
        self._unsent: list[Line] = []
        self._seq = 0
        self._marks: dict[str, asyncio.Event] = {"out": asyncio.Event(), "err": asyncio.Event()}
        self._partial: dict[str, str] = {"out": "", "err": ""}
        self._progress: dict[str, str] = {}  # stream -> the live state of a line redrawn with "\r"
        self._unsent_progress: dict[str, str] = {}
        self._blank: dict[str, bool] = {"out": False, "err": False}
        self._cell: str | None = None
        self._stopped_cell: str | None = None  # a cell stopped before its message came: it does not run
        self._ids = 0
        self._last_event = 0.0
        self._flush_due = False
        self._exit_task: asyncio.Task[None] | None = None
        self.started = time.time()
        self.ending = False  # the host ends it (a reset, a stop): the kernel knows, no event
        self.exit_code: int | None = None
        self._oom_before = oom_kills()
        self.ready: asyncio.Future[RankSays] = self.loop.create_future()
        self.loop.add_reader(self.commands.fileno(), self._read_commands)
        self.loop.add_reader(self.control.fileno(), self._read_control)
        for name, stream in (("out", self.process.stdout), ("err", self.process.stderr)):
            assert stream is not None
            os.set_blocking(stream.fileno(), False)
            self.loop.add_reader(stream.fileno(), self._read_stream, name, stream.fileno())

    @property
    def alive(self) -> bool:
        return self.process.poll() is None

    # -- readers, on the worker's event loop ---------------------------------------------------------------------
    def _read_commands(self) -> None:
        try:
            while self.commands.poll(0):
                self._on_message(self.commands.recv())
        except (EOFError, OSError):
            self.loop.remove_reader(self.commands.fileno())
            self._on_exit()

    def _read_control(self) -> None:
        try:
            while self.control.poll(0):
                message: WhereAnswer | AbortAnswer = self.control.recv()
                future = self._asked.pop(message["id"], None)
                if future is not None and not future.done():
                    future.set_result(message)
        except (EOFError, OSError):
            self.loop.remove_reader(self.control.fileno())

    def _read_stream(self, name: str, fd: int) -> None:
        try:
            data = os.read(fd, 1 << 16)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:  # the rank process closed it: it ended
            self.loop.remove_reader(fd)
            if self._partial[name]:
                self._add_line(name, last_update(self._partial[name]))
                self._partial[name] = ""
            self._marks[name].set()
            return
        text = self._partial[name] + data.decode(errors="replace")
        *complete, partial = text.split("\n")
        for line in complete:
            bar = bool(self._progress.get(name)) or "\r" in line
            if self._progress.get(name):
                self._set_progress(name, "")  # the bar's line ended: its last state is a finished bar's line
            self._take_line(name, last_update(line), bar)
        if "\r" in partial:  # a progress bar redraws its line: the latest state is live, the rest is gone
            partial = "\r" + last_update(partial)
            self._set_progress(name, partial[1:])
        self._partial[name] = partial

    def _set_progress(self, stream: str, text: str) -> None:
        self._progress[stream] = text
        self._unsent_progress[stream] = text
        self._schedule_send()

    def _take_line(self, name: str, text: str, bar: bool = False) -> None:
        """One complete line of ``name``'s stream; a progress bar's last state (``bar``) goes as a ``"bar"`` line,
        which the kernel keeps with the live bars rather than in the stream."""
        if MARK in text:
            before = text.split(MARK, 1)[0]
            if before:
                self._add_line("bar" if bar else name, before)
            self._blank[name] = False
            self._marks[name].set()
            return
        if self._blank[name]:  # a blank line is held back: the REPL writes one before its mark
            self._add_line(name, "")
        if bar:
            self._blank[name] = False
            if text.strip():
                self._add_line("bar", text)
            return
        self._blank[name] = text == ""
        if not self._blank[name]:
            self._add_line(name, text)

    def _add_line(self, stream: str, text: str) -> None:
        entry: Line = (self._seq, stream, text, time.time())
        self._seq += 1
        if len(self._lines) < LINE_LIMIT:
            self._lines.append(entry)
        self._unsent.append(entry)
        self._schedule_send()

    def _schedule_send(self) -> None:
        if not self._flush_due:
            self._flush_due = True
            delay = max(0.0, EVENT_GAP - (time.monotonic() - self._last_event))
            self.loop.call_later(delay, self._send_lines)

    def _send_lines(self) -> None:
        self._flush_due = False
        unsent, self._unsent = self._unsent, []
        progress, self._unsent_progress = self._unsent_progress, {}
        if unsent or progress:
            self._last_event = time.monotonic()
            message: LinesEvent = {"rank": self.rank, "cell": self._cell, "lines": unsent}
            if progress:
                message["progress"] = progress
            self.worker.log_event(self.topic, message)

    def _on_message(self, message: RankSays) -> None:
        if message["op"] == "ready":
            if not self.ready.done():
                self.ready.set_result(message)
            return
        if message["op"] == "started":
            self._started.add(message["id"])
            return
        self._started.discard(message.get("id"))
        future = self._replies.pop(message.get("id") or -1, None)
        if future is not None and not future.done():
            future.set_result(message)

    def _on_exit(self) -> None:
        """The rank process closed its end: it ended (or is ending). Its pending replies say so with its exit
        status, once the process is reaped; where it ended by itself, the kernel hears it as an event too."""
        if self._exit_task is None:
            self._exit_task = self.loop.create_task(self._ended())

    async def _ended(self) -> None:
        try:
            code: int | None = await asyncio.to_thread(self.process.wait, 10)
        except subprocess.TimeoutExpired:
            code = None
        self.exit_code = code
        oom = code == -signal.SIGKILL and oom_kills() > self._oom_before
        if not self.ready.done():
            self.ready.set_exception(RuntimeError(f"the rank process ended at start (exit code {code})"))
        for ident, future in self._replies.items():
            if not future.done():  # "before": it ended before its REPL took the message, which never ran
                future.set_result(ended_reply(code, oom=oom, before=ident not in self._started))
        self._replies.clear()
        if not self.ending:
            self._send_lines()
            exited: ExitedEvent = {"rank": self.rank, "exited": code, "oom": oom, "pid": self.process.pid}
            self.worker.log_event(self.topic, exited)

    async def ask(self, message: Command) -> Reply:
        """Send one message and wait for its reply (a cell's: with every line it printed)."""
        await self.ready
        if self._stopped_cell is not None and message.get("cell") == self._stopped_cell:
            return stopped_reply()
        self._ids += 1
        ident = self._ids
        future: asyncio.Future[Reply] = self.loop.create_future()
        self._replies[ident] = future
        self._lines, self._seq = [], 0
        self._progress, self._unsent_progress = {}, {}
        for event in self._marks.values():
            event.clear()
        self._cell = message["cell"] if message["op"] in ("run", "init") else None
        began = time.perf_counter()
        sent = message.copy()
        sent["id"] = ident
        try:
            self.commands.send(sent)
        except OSError:  # its end of the pipe is closed: it ended (killed between cells) before it took the message
            self._on_exit()
        if self._exit_task is not None and self._exit_task.done() and not future.done():  # its end was heard already
            self._replies.pop(ident, None)
            future.set_result(ended_reply(self.exit_code, oom=False, before=True))
        reply = await future
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.gather(*(event.wait() for event in self._marks.values())), 2.0)
        self._send_lines()
        reply["lines"], reply["line_count"] = list(self._lines), self._seq
        reply.setdefault("seconds", time.perf_counter() - began)
        self._cell = None
        return reply

    async def question(self, op: Literal["where", "abort"], timeout: float = 2.0) -> WhereAnswer | AbortAnswer | None:
        """Ask the rank's control thread (``where``, ``abort``), which answers while a cell runs; ``None`` where
        it did not answer in time."""
        if not self.alive:
            return None
        self._ids += 1
        ident = self._ids
        future: asyncio.Future[WhereAnswer | AbortAnswer] = self.loop.create_future()
        self._asked[ident] = future
        try:
            asked: Question = {"op": op, "id": ident}
            self.control.send(asked)
            return await asyncio.wait_for(future, timeout)
        except (TimeoutError, OSError):
            return None
        finally:
            self._asked.pop(ident, None)

    async def where(self) -> Where:
        """Where the rank's main thread is, in words (``text``), and its process group's state (``collective``)."""
        if not self.alive:
            return {"text": "ended"}
        answer = await self.question("where")
        return answer if answer is not None and answer["op"] == "where" else {"text": "no answer"}

    async def stop(self, grace: float, cell: str | None = None) -> bool:
        """Interrupt the cell (``cell``'s message, where it has not come yet, never runs); end the process if it
        has not stopped after ``grace`` seconds. Whether it ended."""
        if not self.alive:
            return True
        self._stopped_cell = cell
        pending = dict(self._replies)
        deadline = time.monotonic() + grace
        while any(i not in self._started and not f.done() for i, f in pending.items()) and time.monotonic() < deadline:
            await asyncio.sleep(0.005)  # the REPL honours an interrupt once it has taken the message
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.process.pid, signal.SIGINT)
        if pending:
            done, _ = await asyncio.wait(pending.values(), timeout=max(0.0, deadline - time.monotonic()))
            if len(done) == len(pending):
                return False
        elif grace > 0:
            return False
        await self.kill()
        return True

    async def kill(self) -> None:
        self.ending = True
        with contextlib.suppress(ProcessLookupError):
            self.process.kill()
        await asyncio.to_thread(self.process.wait, 10)
        for connection in (self.commands, self.control):
            with contextlib.suppress(OSError, ValueError):
                self.loop.remove_reader(connection.fileno())
            with contextlib.suppress(OSError):
                connection.close()
        for stream in (self.process.stdout, self.process.stderr):
            if stream is not None:
                with contextlib.suppress(OSError, ValueError):
                    self.loop.remove_reader(stream.fileno())
                    stream.close()
        self._on_exit()
        if self._exit_task is not None:
            await self._exit_task


def last_update(line: str) -> str:
    """What a line redrawn with carriage returns shows last: its last part that is not empty (tqdm's, Keras's
    bars; Windows line ends)."""
    if "\r" not in line:
        return line
    return next((part for part in reversed(line.split("\r")) if part), "")


def oom_kills() -> int:
    """How many processes the kernel's OOM killer ended in this worker's memory cgroup so far (0 where it cannot
    be read): a rank killed by ``SIGKILL`` while it grew is named as the OOM killer's."""
    for path in ("/sys/fs/cgroup/memory.events", "/sys/fs/cgroup/memory/memory.oom_control"):
        with contextlib.suppress(OSError, ValueError), open(path) as file:
            for line in file:
                name, _, count = line.partition(" ")
                if name == "oom_kill":
                    return int(count)
    return 0
