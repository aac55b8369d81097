"""In the kernel: what ``%load_ext`` begins ahead of a first ``%gpucluster``, so that its start has less to wait
for: the kernel's own imports of what a start needs (distributed, dask-cuda where it is installed, dask.array,
CuPy: none of them touches CUDA), in a thread that begins once the ``%load_ext`` cell ends.

Two threads importing one package can each see it half made, so while that thread imports, the kernel's main
thread waits for it before an import of a module not yet imported (any ``import`` statement, in a cell or in the
code it calls: ``builtins.__import__`` is wrapped meanwhile, and put back when the imports are done), and each magic
of this package waits before it runs (``wait_for_imports``). Nothing else waits: a cell that imports nothing new
(``N = 4_000``, ``dask.config.set(...)`` after ``import dask``) runs at once, and so does what shows an error (its
traceback's imports). A wait that passes a second is said once, in one line (in a notebook, a line that is gone
once the wait ends: a saved or executed notebook keeps no trace of it); an interrupt ends it in one line.
"""

from __future__ import annotations

import builtins
import contextlib
import importlib
import importlib.util
import sys
import threading
import time
import types
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from IPython import get_ipython
from IPython.display import DisplayHandle, display

from gpu_magics.text.units import dropped

KERNEL_MODULES = (
    "distributed",
    "distributed.deploy.local",
    "dask.array",
    "distributed.protocol.numpy",
    "gpu_magics.cluster.managers.local.cluster",
    "gpu_magics.cluster.managers.local.factories",
    "gpu_magics.cluster.workers.warmup",
    "gpu_magics.cluster.telemetry.collector",
    "gpu_magics.cluster.control.record_writer",
)
GPU_MODULES = ("dask_cuda", "cupy", "distributed.protocol.cupy")  # where installed
# the scheduler's dashboard (where bokeh is installed): importing it was most of the scheduler's start (0.7 of 0.8 s)
DASHBOARD_MODULES = ("distributed.dashboard.scheduler",)
IMPORT_WAIT_S = 120.0
SAY_AFTER_S = 1.0  # a wait longer than this is said, once
WAITING_LINE = "waiting for dask and distributed to finish importing (begun by %load_ext gpu_magics)"

_thread: threading.Thread | None = None
_after_cell: Callable[..., None] | None = None
_wrapped: tuple[Callable[..., Any], Callable[..., Any]] | None = None  # builtins.__import__ as it was, and ours
_said = False


def import_after_this_cell(shell: Any) -> None:
    """Once the cell that runs now ends, import ``KERNEL_MODULES`` (and ``GPU_MODULES`` that are installed) in a
    thread; once per kernel."""
    global _after_cell

    def after_cell(*_: Any) -> None:
        global _thread
        cancel(shell)
        if _thread is None:
            _thread = threading.Thread(target=_import_all, name="gpu-magics-imports", daemon=True)
            _wrap_import(_thread)
            _thread.start()

    cancel(shell)
    _after_cell = after_cell
    shell.events.register("post_run_cell", after_cell)


def cancel(shell: Any) -> None:
    """The imports not begun after all (``%load_ext`` interrupted, or unloaded in its own cell)."""
    global _after_cell
    callback, _after_cell = _after_cell, None
    if callback is not None:
        with contextlib.suppress(ValueError):
            shell.events.unregister("post_run_cell", callback)


def importing() -> bool:
    """Whether the imports begun ahead still go on."""
    thread = _thread
    return thread is not None and thread.is_alive() and thread is not threading.current_thread()


def wait_for_imports() -> None:
    """Return once the imports begun ahead are done (at once when none were begun); an interrupt is one line, a
    wait that passes ``SAY_AFTER_S`` is said once."""
    global _said
    thread = _thread
    if thread is None or thread is threading.current_thread():
        return
    began = time.monotonic()
    shown: DisplayHandle | None = None
    try:
        while thread.is_alive() and not _waits_for_us(thread) and time.monotonic() - began < IMPORT_WAIT_S:
            thread.join(0.1)
            if not _said and thread.is_alive() and time.monotonic() - began > SAY_AFTER_S:
                _said = True
                shown = _say_waiting()
    except KeyboardInterrupt:
        from gpu_magics.cluster.background.starting import short_interrupt

        raise short_interrupt(
            "interrupted while waiting for the imports that %load_ext gpu_magics began (dask, distributed)"
        ) from None
    finally:
        if shown is not None:
            shown.update({"text/plain": "", "text/html": ""}, raw=True)  # the wait is over: nothing left to read


def _say_waiting() -> DisplayHandle | None:
    """``WAITING_LINE``: in a kernel an output that the end of the wait empties (returned), else printed."""
    if getattr(get_ipython(), "kernel", None) is None:
        print(WAITING_LINE, flush=True)
        return None
    return display({"text/plain": WAITING_LINE}, raw=True, display_id=True)


def _waits_for_us(thread: threading.Thread) -> bool:
    """Whether ``thread`` waits for the lock of a module that this thread is importing (waiting for it would never
    end; importlib's own locks sort the two out instead). Read from importlib's bookkeeping, where it has one."""
    blocking = getattr(sys.modules.get("importlib._bootstrap"), "_blocking_on", None)
    try:
        held = blocking.get(thread.ident) if blocking is not None else None
    except (AttributeError, TypeError):
        return False
    locks = held if isinstance(held, list) else [held]
    return any(getattr(lock, "owner", None) == threading.get_ident() for lock in locks if lock is not None)


def _wrap_import(imports: threading.Thread) -> None:
    """While ``imports`` runs, an import in the main thread of a module not yet imported waits for it first."""
    global _wrapped
    original = builtins.__import__
    main = threading.main_thread()

    def gated_import(
        name: str,
        globals: Mapping[str, object] | None = None,
        locals: Mapping[str, object] | None = None,
        fromlist: Sequence[str] | None = (),
        level: int = 0,
    ) -> types.ModuleType:
        __tracebackhide__ = True  # IPython leaves this frame out of a failed import's traceback
        if (
            imports.is_alive()
            and threading.current_thread() is main
            and sys.exc_info()[0] is None  # not while an error is shown: a traceback never waits for them
            and _new(name, globals, fromlist, level)
        ):
            wait_for_imports()
        return original(name, globals, locals, fromlist, level)

    _wrapped = (original, gated_import)
    builtins.__import__ = gated_import


def _unwrap_import() -> None:
    """``builtins.__import__`` as it was, unless something wrapped it since (then ours only passes calls on)."""
    global _wrapped
    if _wrapped is not None and builtins.__import__ is _wrapped[1]:
        builtins.__import__ = _wrapped[0]
    _wrapped = None


def _new(name: str, globals: Mapping[str, object] | None, fromlist: Sequence[str] | None, level: int) -> bool:
    """Whether ``import`` would load something: the module is not imported yet (or half made), or a name it
    imports from it is not there yet (a submodule)."""
    if level:
        package = str((globals or {}).get("__package__") or "")
        try:
            name = importlib.util.resolve_name("." * level + name, package)
        except (ImportError, ValueError):
            return True
    module = sys.modules.get(name)
    if module is None or getattr(getattr(module, "__spec__", None), "_initializing", False):
        return True
    return any(item != "*" and item not in vars(module) for item in fromlist or ())


def _import_all() -> None:
    gpu = [name for name in GPU_MODULES if _installed(name)]
    dashboard = DASHBOARD_MODULES if _installed("bokeh") else ()
    try:
        for name in (*KERNEL_MODULES, *dashboard, *gpu):
            try:
                importlib.import_module(name)
            except Exception as error:  # any failure (broken CUDA): the cell that needs it imports again, and says why
                dropped(f"importing {name} ahead", error)
    finally:
        _unwrap_import()


def _installed(name: str) -> bool:
    try:
        return importlib.util.find_spec(name.split(".")[0]) is not None
    except (ImportError, ValueError):
        return False
