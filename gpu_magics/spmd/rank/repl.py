"""The rank's REPL: runs the cells it is handed in one namespace that lives as long as the process.

Started as ``python -m gpu_magics.spmd.rank CMD_FD CTL_FD`` by the rank host; each FD is its end of a socket
pair that carries pickled messages both ways. The main thread reads the commands and runs the cells (so
``SIGINT`` from the host raises ``KeyboardInterrupt`` in user code, and a command costs no hand-over between
threads); a control thread answers "where are you" from the side (the main thread's stack, even while it waits
in a collective) and ends the process when the host goes away (end of file: the worker died), so no rank
outlives its worker.

After each cell the REPL writes a marker line to stdout and stderr (``MARK`` + the message id), so the host knows
every line the cell printed has arrived before it reports the cell done.
"""

from __future__ import annotations

import ast
import contextlib
import linecache
import os
import pickle
import signal
import sys
import sysconfig
import threading
import time
import traceback
from multiprocessing.connection import Connection
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gpu_magics.spmd.messages import Command, Question, RankError, Ready, Reply, Started

MARK = "\x1egpu-magics-spmd-done "
VALUE_LIMIT = 256 * 2**20  # bytes: a larger last value comes back as its repr only
REPR_LIMIT = 4000  # characters of a value's repr
_HERE = os.path.dirname(os.path.abspath(__file__))


class Repl:
    """One rank's namespace and the connection to its host."""

    def __init__(self, commands: Connection, control: Connection) -> None:
        self.commands, self.control = commands, control
        self.namespace: dict[str, Any] = {"__name__": "__main__", "__builtins__": __builtins__}
        names = os.environ.get("GPU_MAGICS_SPMD_ENV", "").split(",")
        self.environment = {name: os.environ[name] for name in names if name in os.environ}
        self._main = threading.main_thread().ident
        self.running = False  # an interrupt stops a cell only: between cells (replying, waiting) it is ignored
        self.taken = False  # a message is taken and not yet answered: an interrupt before it runs stops it
        self.interrupt_due = False
        self.interrupted = False  # an interrupt came while this message ran (a SystemExit after it is its stop)
        self.waiting_for_gpu = False  # the cell's code ended; its GPU work (a collective among it) has not

    def __reduce__(self) -> Any:
        """Never pickled: a cell's value that holds the REPL (``signal.signal`` returns its SIGINT handler) would
        bring its connections to the kernel, whose file descriptors they would close there; its repr travels."""
        raise TypeError("the rank's REPL does not leave its process")

    def on_interrupt(self, signum: int, frame: Any) -> None:
        if self.running:
            self.interrupted = True
            raise KeyboardInterrupt
        if self.taken:  # the host stopped the message between "started" and its code: it stops as it begins
            self.interrupt_due = True

    def put_environment_back(self) -> None:
        """The rank's environment as its host set it (``RANK``, ``WORLD_SIZE``, ``MASTER_PORT`` ...): a library
        that removed or changed it in one cell (Lightning's teardown deletes ``WORLD_SIZE``) finds it in the next."""
        for name, value in self.environment.items():
            if os.environ.get(name) != value:
                os.environ[name] = value

    # -- the control thread ----------------------------------------------------------------------------------------
    def control_forever(self) -> None:
        """Answer "where are you" (with the process group's state) and "abort the group"; the host's end closing
        means the worker is gone: end at once."""
        from gpu_magics.spmd.rank import collectives

        while True:
            try:
                question: Question = self.control.recv()
                if question["op"] == "abort":
                    self.control.send({"op": "abort", "id": question["id"], "aborted": collectives.abort(self.running)})
                else:
                    frame = sys._current_frames().get(self._main or 0)
                    state = collectives.state(frame, self.waiting_for_gpu)
                    self.control.send({"op": "where", "id": question["id"], "text": self.where(), "collective": state})
            except (EOFError, OSError):
                os._exit(0)

    def where(self) -> str:
        """Where the main thread is now: its innermost frames, the cell's own line first."""
        frame = sys._current_frames().get(self._main or 0)
        if frame is None:
            return ""
        stack = traceback.extract_stack(frame)
        mine = [entry for entry in stack if not entry.filename.startswith(_HERE)]
        if self.waiting_for_gpu:
            return "waiting for the GPU after the cell"
        built = building(frame)
        if built:
            return built
        if not mine:
            return "idle"
        cell = [entry for entry in mine if entry.filename.startswith("<rank")]
        innermost = mine[-1]
        parts = []
        if cell:
            own = cell[-1]
            parts.append(f"cell line {own.lineno}" + ("" if own.name == "<module>" else f", in {own.name}"))
        if not innermost.filename.startswith("<rank"):
            parts.append(f"in {innermost.name} ({os.path.basename(innermost.filename)}:{innermost.lineno})")
        return ", ".join(parts)

    # -- the main thread -------------------------------------------------------------------------------------------
    def serve(self) -> None:
        ready: Ready = {"op": "ready", "pid": os.getpid()}
        self.commands.send(ready)
        while True:
            try:
                message: Command = self.commands.recv()
                self.taken = True
                started: Started = {"op": "started", "id": message.get("id")}
                self.commands.send(started)  # the host: this message ran (it interrupts only from here on)
            except (EOFError, OSError):
                os._exit(0)
            reply = self.handle(message)
            self.taken = self.interrupt_due = False
            _mark(message.get("id"))
            self.commands.send(reply)

    def handle(self, message: Command) -> Reply:
        from gpu_magics.spmd.rank import collectives

        began = time.perf_counter()
        entered = collectives.sequence()
        reply: Reply = {"op": "done", "id": message.get("id"), "ok": True, "value": None, "repr": None, "error": None}
        signal.signal(signal.SIGINT, self.on_interrupt)  # a library may have taken it (Lightning ignores it after one)
        self.interrupted = False
        try:
            self.running = True
            if self.interrupt_due:
                raise KeyboardInterrupt
            if message["op"] == "run":
                self.put_environment_back()
                value = run_cell(self.namespace, message["code"], message["name"])
                self.wait_for_gpu(float(message.get("gpu_wait_s", 300.0)))
                if value is not None:
                    self.namespace["_"] = value
                    reply["value"], reply["repr"] = _pack(value)
            elif message["op"] == "push":
                for name, data in message["values"].items():
                    self.namespace[name] = pickle.loads(data)
            elif message["op"] == "pull":
                reply["values"] = {name: _pack(self.namespace[name]) for name in message["names"]}
            elif message["op"] == "init":
                from gpu_magics.spmd.rank import groups

                self.environment.update(message.get("env") or {})  # a group made again gets a new port
                self.put_environment_back()
                remake = bool(message.get("remake"))
                reply["repr"] = groups.initialize(message["kind"], float(message["timeout"]), remake)
            elif message["op"] == "held":
                from gpu_magics.spmd.rank.held_by_name import as_rows, held_by_name, pool_figures, roots

                reply["held"] = as_rows(held_by_name(roots(self.namespace, None, None)))
                reply["pools"] = pool_figures()
            elif message["op"] in ("park", "unpark", "plan-park"):
                from gpu_magics.spmd.rank import parking

                if message["op"] == "plan-park":
                    reply["parked"] = {"bytes": parking.held_bytes()}
                else:
                    reply["parked"] = parking.park() if message["op"] == "park" else parking.unpark()
            else:
                raise ValueError(f"unknown message {message.get('op')!r}")
        except BaseException as error:  # the cell's own failure, KeyboardInterrupt included: reported, not fatal
            self.running = False
            reply["ok"], reply["error"] = False, _describe(error, self.interrupted)
        finally:
            self.running = False
        reply["seconds"] = time.perf_counter() - began
        reply["peak_memory"] = _peak_gpu_memory()
        after = collectives.sequence()  # a group made or ended in the message: how many is not known
        reply["collectives"] = (after or 0) - (entered or 0) if (after is None) == (entered is None) else None
        return reply

    def wait_for_gpu(self, limit_s: float) -> None:
        """Wait until the GPU work the cell queued has finished (NCCL collectives return before they complete), so
        that "done" means done: interruptible, bounded by ``limit_s``, nothing where the cell used no CUDA."""
        torch = sys.modules.get("torch")
        if torch is None or not torch.cuda.is_initialized():
            return
        waiter = threading.Thread(target=_synchronize, args=(torch,), name="gpu-magics-gpu-wait", daemon=True)
        waiter.start()
        deadline = time.monotonic() + limit_s
        self.waiting_for_gpu = True
        try:
            while waiter.is_alive() and time.monotonic() < deadline:
                waiter.join(0.05)  # a lock wait: Ctrl-C (the host's SIGINT) ends it
        finally:
            self.waiting_for_gpu = False


def building(frame: Any) -> str | None:
    """What the main thread builds, where it compiles a C++/CUDA op on first use (or waits for another rank of this
    host that does): ``building DeepSpeed's fused_adam op (first use, cached afterwards)``; ``None`` otherwise.
    torch caches the build (``TORCH_EXTENSIONS_DIR``, by default ``~/.cache/torch_extensions``) for later kernels."""
    op = extension = None
    while frame is not None:
        code = frame.f_code
        if code.co_name == "jit_load" and "op_builder" in code.co_filename:
            op = getattr(frame.f_locals.get("self"), "name", None)
        elif code.co_name == "_jit_compile" and code.co_filename.endswith("cpp_extension.py"):
            extension = frame.f_locals.get("name")
        frame = frame.f_back
    if op:
        return f"building DeepSpeed's {op} op (first use, cached afterwards)"
    return f"building the torch extension {extension} (first use, cached afterwards)" if extension else None


def _synchronize(torch: Any) -> None:
    with contextlib.suppress(RuntimeError):  # an aborted communicator's CUDA error: the wait is over all the same
        torch.cuda.synchronize()


def run_cell(namespace: dict[str, Any], code: str, name: str) -> Any:
    """Run ``code`` as IPython runs a cell: every statement, then the last expression's value (``None`` when the
    cell ends with a statement or a ``;``)."""
    tree = ast.parse(code, name)
    last: ast.Expression | None = None
    final = tree.body[-1] if tree.body else None
    if isinstance(final, ast.Expr) and not code.rstrip().endswith(";"):
        tree.body.pop()
        last = ast.Expression(final.value)
    linecache.cache[name] = (len(code), None, code.splitlines(True), name)
    exec(compile(tree, name, "exec"), namespace)
    return eval(compile(last, name, "eval"), namespace) if last is not None else None


def _pack(value: Any) -> tuple[bytes | None, str]:
    """The value as bytes the kernel can load (``None`` where it cannot travel), and its repr."""
    try:
        text = repr(value)
    except Exception as error:  # a user's repr may fail any way: said in its place
        text = f"<{type(value).__name__} (repr failed: {error})>"
    if len(text) > REPR_LIMIT:
        text = text[:REPR_LIMIT] + " ..."
    try:
        import cloudpickle

        data: bytes | None = cloudpickle.dumps(value, protocol=5)
    except Exception:  # a value may fail to pickle any way: its repr travels instead
        data = None
    if data is not None and len(data) > VALUE_LIMIT:
        data = None
    return data, text


def _describe(error: BaseException, interrupted: bool = False) -> RankError:
    """The error as the kernel shows it: its type, message and traceback, the user's frames in full and each run
    of library frames folded into one line (``... 8 frames in torch``); ``full`` keeps every frame but the REPL's."""
    full = traceback.TracebackException.from_exception(error)
    folded = traceback.TracebackException.from_exception(error)
    for described, kind in ((full, traceback.StackSummary), (folded, _FoldedStack)):  # list subclasses
        seen: set[int] = set()
        while described is not None and id(described) not in seen:  # the error, then its cause or context
            seen.add(id(described))
            frames = [frame for frame in described.stack if not frame.filename.startswith(_HERE)]
            described.stack = kind(frames)
            described = described.__cause__ or described.__context__  # type: ignore[assignment]
    return {
        "type": type(error).__name__,
        "message": str(error),
        "traceback": "".join(folded.format()),
        "full": "".join(full.format()),
        # a SystemExit after an interrupt is how some libraries stop on one (Lightning's Trainer calls exit(1))
        "interrupted": isinstance(error, KeyboardInterrupt) or (interrupted and isinstance(error, SystemExit)),
    }


class _FoldedStack(traceback.StackSummary):
    """Frames as Python prints them, except that two or more library frames in a row show as one line."""

    def format(self) -> list[str]:
        out: list[str] = []
        run: list[tuple[traceback.FrameSummary, str]] = []
        for frame in [*self, None]:
            package = None if frame is None else library(frame.filename)
            if frame is not None and package is not None:
                run.append((frame, package))
                continue
            if len(run) > 1:
                names = ", ".join(dict.fromkeys(name for _, name in run))
                out.append(f"  ... {len(run)} frames in {names}\n")
            elif run:
                out.extend(traceback.StackSummary.from_list([run[0][0]]).format())
            run = []
            if frame is not None:
                out.extend(traceback.StackSummary.from_list([frame]).format())
        return out


def library(filename: str) -> str | None:
    """The package a frame's file belongs to, where it is a library's (installed, or Python's own): ``torch``,
    ``json``; ``None`` for the user's code (the cell, the user's own files)."""
    if filename.startswith("<frozen "):
        return filename[len("<frozen ") :].rstrip(">").split(".", 1)[0]
    if filename.startswith("<"):
        return None
    path = os.path.abspath(filename)
    for marker in ("site-packages", "dist-packages"):
        _, found, tail = path.rpartition(os.sep + marker + os.sep)
        if found:
            return _top(tail)
    for root in _STDLIB:
        if path.startswith(root + os.sep):
            return _top(path[len(root) + 1 :])
    return None


def _top(relative: str) -> str:
    first = relative.split(os.sep, 1)[0]
    return first[:-3] if first.endswith(".py") else first


_STDLIB = tuple({sysconfig.get_paths()[name] for name in ("stdlib", "platstdlib")})


def _peak_gpu_memory() -> int | None:
    """torch's peak of allocated GPU memory in this process since the last cell, where torch uses CUDA here."""
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    try:
        if not torch.cuda.is_initialized():
            return None
        peak = int(torch.cuda.max_memory_allocated())
        torch.cuda.reset_peak_memory_stats()
        return peak
    except Exception:  # torch's CUDA state may fail any way: no peak shown
        return None


def _mark(ident: Any) -> None:
    """The line after the cell's last output on both streams (C libraries' output included: it shares the fds)."""
    for stream, fd in ((sys.stdout, 1), (sys.stderr, 2)):
        with contextlib.suppress(OSError, ValueError):  # a stream closed or gone
            stream.flush()
        with contextlib.suppress(OSError):
            os.write(fd, f"\n{MARK}{ident}\n".encode())


def main(argv: list[str]) -> None:
    from gpu_magics.arrays.caps import allocators

    # its share of the notebook's memory cap, on every GPU it sees (CuPy's and JAX's came in its environment)
    allocators.limit_from_env(len([gpu for gpu in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if gpu]))
    repl = Repl(Connection(int(argv[1])), Connection(int(argv[2])))
    signal.signal(signal.SIGINT, repl.on_interrupt)
    threading.Thread(target=repl.control_forever, name="gpu-magics-rank-control", daemon=True).start()
    repl.serve()
