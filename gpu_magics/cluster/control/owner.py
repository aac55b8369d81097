"""The one thread that changes the cluster in use: the only caller of the kernel's cluster (``post``: an event in,
its instructions carried out), and the writer of what is taken into use or let go with it and of its record.

The verbs (start, restart, scale, adapt, stop, the idle watcher's stop) and the record's writers run on their own
threads (the kernel's, a start's, the idle watcher's, the record refresher's) and do their network waits there; they
``post`` each event of the cluster and hand each other change of state to ``change``, which runs it on the owner
thread, one after another, and returns its result (its error raised in the caller). A change never waits on the
network or on another thread, so a ``stop`` answers while a restart waits for its workers. What a change asks to
run ``afterwards`` (telling listeners of a new cluster in use: they may talk to the old one's workers) runs on the
caller's thread once the change is made.

The thread starts with the first change, not at import.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import functools
import queue
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from gpu_magics.cluster.control import kernel_cluster
from gpu_magics.cluster.control.machine.events import Event, Instruction, StopServices, TellListeners, WatchAgain
from gpu_magics.cluster.control.machine.phase import View
from gpu_magics.text.units import dropped

if TYPE_CHECKING:
    from gpu_magics.cluster.reading.running import ActiveCluster

T = TypeVar("T")
Inst = TypeVar("Inst", bound=Instruction)
THREAD_NAME = "gpu-magics-cluster-owner"

_lock = threading.Lock()  # guards the thread's start only
_thread: threading.Thread | None = None
_queue: queue.SimpleQueue[tuple[Callable[[], Any], concurrent.futures.Future[Any], list[Callable[[], None]]]]
_queue = queue.SimpleQueue()
_local = threading.local()  # on the owner: the callbacks the change under way asked to run afterwards


def on_owner() -> bool:
    """Whether this is the owner thread (a change under way)."""
    return threading.current_thread() is _thread


def require_owner(what: str) -> None:
    """Raise where ``what`` (a change of the cluster's state) runs on another thread than the owner."""
    if not on_owner():
        here = threading.current_thread().name
        raise RuntimeError(f"{what} runs on the cluster's owner thread only (owner.change), not on {here}")


def change(action: Callable[[], T]) -> T:
    """Run ``action`` on the owner thread after the changes asked before it, and return what it returns (what it
    raises, raised here); on the owner thread itself it runs at once. Then what it asked to run ``afterwards``."""
    if on_owner():
        return action()
    try:
        _ensure_thread()
    except RuntimeError:  # the interpreter is ending (no new thread at exit): nothing else changes the cluster now
        return action()
    later: list[Callable[[], None]] = []
    done: concurrent.futures.Future[T] = concurrent.futures.Future()
    _queue.put((action, done, later))
    try:
        concurrent.futures.wait([done])
    except BaseException:  # interrupted while it waits: the owner runs them, once the change is made
        _queue.put((functools.partial(_run_all, later), concurrent.futures.Future(), []))
        raise
    _run_all(later)
    return done.result()


def _run_all(callbacks: list[Callable[[], None]]) -> None:
    for callback in callbacks:
        callback()


def afterwards(callback: Callable[[], None]) -> None:
    """Run ``callback`` on the thread that asked for the change under way, once it is made (at once where no change
    is under way on this thread)."""
    later: list[Callable[[], None]] | None = getattr(_local, "later", None)
    if later is None or not on_owner():
        callback()
    else:
        later.append(callback)


def _ensure_thread() -> None:
    global _thread
    with _lock:
        if _thread is None or not _thread.is_alive():
            _thread = threading.Thread(target=_serve, name=THREAD_NAME, daemon=True)
            _thread.start()


def _serve() -> None:
    while True:
        _run_one(*_queue.get())  # in a call of its own: nothing of the last change stays referenced while it waits


def _run_one(action: Callable[[], Any], done: concurrent.futures.Future[Any], later: list[Callable[[], None]]) -> None:
    if not done.set_running_or_notify_cancel():
        return
    _local.later = later
    try:
        done.set_result(action())
    except BaseException as error:  # the change's own failure: raised in the thread that asked for it
        done.set_exception(error)
    finally:
        _local.later = None


def post(event: Event) -> list[Instruction]:
    """Hand ``event`` to the kernel's cluster on the owner thread, after the changes asked before it, and return
    what it answered; telling the listeners of a new cluster in use runs here, once the change is made."""
    return change(functools.partial(_handle, event))


_carriers: dict[type[Instruction], Callable[[Any], None]] = {}


def carries(kind: type[Inst], carrier: Callable[[Inst], None]) -> None:
    """Have the owner carry out every ``kind`` instruction with ``carrier``, in the same step as the machine answered
    it (a module above this one registers what it knows how to do, at its import)."""
    _carriers[kind] = carrier


def _handle(event: Event) -> list[Instruction]:
    instructions = kernel_cluster.kernel_cluster().handle(event)
    for instruction in instructions:
        carrier = _carriers.get(type(instruction))
        if carrier is not None:
            carrier(instruction)
        elif isinstance(instruction, TellListeners):  # on the poster's thread: they may talk to the workers
            afterwards(functools.partial(_tell_listeners, instruction.cluster))
        elif isinstance(instruction, WatchAgain):  # on the poster's thread: a new watch starts its thread
            afterwards(instruction.watch.again)
        elif isinstance(instruction, StopServices):  # on the poster's thread: they wait for their threads
            afterwards(functools.partial(_stop_services, instruction))
    return instructions


def _stop_services(stopping: StopServices) -> None:
    for service in stopping.services:
        try:
            service.stop()
        except (OSError, RuntimeError, TimeoutError) as error:  # a thread or the network that fails to end: the next
            # one stops all the same
            dropped("stopping what ran beside the cluster", error)


def view() -> View:
    """The kernel's cluster at this moment (on any thread: one consistent read, made on the owner)."""
    return change(kernel_cluster.kernel_cluster().view)


def replace_figures(cluster: ActiveCluster, **figures: Any) -> None:
    """Replace what the start, a restart or a scale learnt of ``cluster`` (``ready_s``, ``warm_s``, ``devices``),
    on the owner: every reader sees the old figures or the new ones, never half of them."""

    def replace() -> None:
        cluster.figures = dataclasses.replace(cluster.figures, **figures)

    change(replace)


Listener = Callable[["ActiveCluster | None"], None]
_listeners: list[Listener] = []
_listeners_lock = threading.Lock()


def _tell_listeners(cluster: ActiveCluster | None) -> None:
    for listener in list(_listeners):
        try:
            listener(cluster)
        except Exception as error:  # a listener never stops the lifecycle
            dropped("telling a listener of the cluster in use", error)


def on_change(listener: Listener) -> Callable[[], None]:
    """Call ``listener`` with the new cluster (``None``: none) whenever the cluster in use changes, before the
    lifecycle undoes what the old one set; returns what removes the listener."""
    with _listeners_lock:
        _listeners.append(listener)

    def remove() -> None:
        with _listeners_lock, contextlib.suppress(ValueError):
            _listeners.remove(listener)

    return remove
