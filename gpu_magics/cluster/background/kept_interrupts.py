"""In the kernel: an interrupt (the notebook's stop button) always ends the running cell, while a scheduler runs in
the kernel's process too.

Python raises the interrupt in whatever code of the main thread runs next; where that is a garbage collection
callback, a ``__del__`` or a weakref callback, the interrupt is "ignored" (printed as ``Exception ignored in ...``)
and the cell runs on. A scheduler (and an in-process worker) turns on distributed's GC diagnosis, a callback run at
every collection of the process, so a cell that allocates (``{i: [i] for i in ...}`` in a loop) lost one interrupt
in a few. Two things here:

- ``scheduler_gc_off``: distributed's GC diagnosis is replaced, for this process, by a stand-in that counts its
  users as distributed does but never hooks into ``gc`` (its notes, "full garbage collections took 12% CPU time",
  measured the user's cells, not the scheduler); called at ``%load_ext`` where distributed is imported, and before
  each cluster start here (``start_logs.during_start``).
- ``install``: an interrupt that Python had to ignore in the main thread is raised again at once
  (``sys.unraisablehook``), so one from any other finalizer still ends the cell; it is not printed.
"""

from __future__ import annotations

import _thread
import sys
import threading
from typing import Any

_saved: dict[str, Any] = {}  # what was replaced: "hook" (sys.unraisablehook), "diagnosis" (distributed's)


class QuietDiagnosis:
    """Stands in for ``distributed.gc._gc_diagnosis``: enabled and disabled as distributed asks, never in
    ``gc.callbacks``."""

    def __init__(self, enabled: bool) -> None:
        self._enabled = enabled
        self._fractional_timer = None  # ``distributed.gc.gc_collect_duration`` reads it: no time measured

    @property
    def enabled(self) -> bool:
        return self._enabled

    def enable(self) -> None:
        self._enabled = True

    def disable(self) -> None:
        self._enabled = False


def scheduler_gc_off() -> None:
    """Take distributed's GC diagnosis out of this process (its callback out of ``gc.callbacks`` where it was
    in); once, until ``uninstall``. Imports ``distributed.gc``: call it where distributed is imported anyway."""
    import distributed.gc as gc_notes

    with gc_notes._gc_diagnosis_lock:
        diagnosis = gc_notes._gc_diagnosis
        if isinstance(diagnosis, QuietDiagnosis):
            return
        enabled = bool(diagnosis.enabled)
        if enabled:
            diagnosis.disable()
        _saved["diagnosis"] = diagnosis
        gc_notes._gc_diagnosis = QuietDiagnosis(enabled)  # type: ignore[assignment]


def _scheduler_gc_back() -> None:
    """distributed's own GC diagnosis again, enabled where the stand-in was."""
    diagnosis = _saved.pop("diagnosis", None)
    if diagnosis is None:  # never taken out: distributed.gc may not even be imported
        return
    import distributed.gc as gc_notes

    with gc_notes._gc_diagnosis_lock:
        stand_in = gc_notes._gc_diagnosis
        gc_notes._gc_diagnosis = diagnosis
        if stand_in.enabled and not diagnosis.enabled:
            diagnosis.enable()


def _raise_again(unraisable: Any) -> None:
    """``sys.unraisablehook``: an interrupt ignored in the main thread is raised there again, from a new thread
    once this hook returned (raised from here, Python would raise it inside the hook again: ignored once more);
    anything else goes to the hook that was there before."""
    interrupt = unraisable.exc_type is not None and issubclass(unraisable.exc_type, KeyboardInterrupt)
    if interrupt and threading.current_thread() is threading.main_thread():
        # not ``threading.Thread``: its start waits for the thread, which may raise the interrupt meanwhile; it
        # does nothing where SIGINT is ignored (between cells), and one ignored again comes back here
        _thread.start_new_thread(_thread.interrupt_main, ())
        return
    _saved.get("hook", sys.__unraisablehook__)(unraisable)


def install(shell: object = None) -> None:
    """At ``%load_ext``: ignored interrupts raised again; distributed's GC diagnosis out where distributed is
    imported already (else before the first start here)."""
    if sys.unraisablehook is not _raise_again:
        _saved["hook"] = sys.unraisablehook
        sys.unraisablehook = _raise_again
    from gpu_magics.cluster.background import ahead

    if "distributed.gc" in sys.modules and not ahead.importing():  # never a module the import thread still makes
        scheduler_gc_off()


def uninstall(shell: object = None) -> None:
    """At ``%unload_ext``: the unraisable hook and distributed's GC diagnosis as they were."""
    if sys.unraisablehook is _raise_again:
        sys.unraisablehook = _saved.pop("hook", sys.__unraisablehook__)
    _scheduler_gc_back()
