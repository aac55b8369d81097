"""The session backend: ``%gpurun BACKEND`` (a line, no cell) runs every following plain cell as if it were under
``%%gpurun BACKEND -q``, until ``%gpurun off``.

The plan is the one ``%%gpurun`` builds (``backends.plan``). Its dask settings are applied once and stay applied
between cells, so a plain cell pays nothing for them; they are taken away while a ``%%gpurun`` cell runs its own
backend, and put back exactly as they were on ``off``. Around each plain cell (IPython's ``pre_run_cell`` and
``post_run_cell``): the note when an array made earlier has chunks of the other kind, the task annotations of a
mixed cluster, after an interrupt on a cluster the line that says what still runs there, and, with
``GpuMagics.session_summary``, the one-line summary with the time split.

Where plain cells run is one state of the session (``now``): here with dask's own settings (``None``), on a backend
plan, or as SPMD cells (``%gpurun spmd``: ``spmd_cells``); choosing one ends the one before, ``off`` ends either.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Protocol

import dask
from IPython.core.interactiveshell import InteractiveShell

from gpu_magics.gpurun import backends, execute
from gpu_magics.gpurun.backends import BackendPlan
from gpu_magics.gpurun.graphs import kernel_tail
from gpu_magics.gpurun.results import RunResult
from gpu_magics.gpurun.session.spmd_cells import SpmdCells
from gpu_magics.gpurun.timing import advice, task_count
from gpu_magics.text.errors import said_in_one_line
from gpu_magics.text.units import dropped

PROG = "%gpurun"
_KEY = "_gpu_magics_session"


class SessionSettings(Protocol):
    """What the session asks of ``GpuMagics``: whether to show a summary, and what follows a cell on a backend
    (after an interrupt on a cluster, what still runs there; the pool given back after a GPU cell)."""

    session_summary: bool

    def after_session_cell(self, plan: BackendPlan, error: BaseException | None) -> None: ...


@dataclass
class _Cell:
    """A plain cell being run in the session: what its end needs."""

    stack: contextlib.ExitStack
    names: frozenset[str]
    recorded: task_count.Recorded | None = None
    began: float = 0.0
    gathered: int = 0  # ``kernel_tail.gathered()`` as the cell began


class Session:
    """One shell's plain cells: where they run (``now``), and what happens around each."""

    def __init__(self, shell: InteractiveShell, settings: SessionSettings) -> None:
        self.shell = shell
        self.settings = settings
        self.now: BackendPlan | SpmdCells | None = None  # None: here, with dask's own settings
        self._applied: contextlib.ExitStack | None = None
        self._cell: _Cell | None = None
        from gpu_magics.cluster.control import queries

        self._stop_listening = queries.on_change(self._cluster_changed)

    def _cluster_changed(self, cluster: Any) -> None:
        """The cluster in use changed (stopped, closed when idle, replaced): plain cells that ran on the old one
        run in this kernel again, said in one line."""
        plan = self.plan
        if plan is None or plan.client is None or (cluster is not None and cluster.client is plan.client):
            return
        self.end()
        print(
            f"{PROG}: plain cells no longer run on the cluster ({plan.name}); they run with dask's own settings in "
            f"this kernel. {PROG} {plan.name} after the next %gpucluster puts them back"
        )

    @property
    def plan(self) -> BackendPlan | None:
        """The backend plain cells run on (``None``: dask's own settings, or SPMD cells)."""
        return self.now if isinstance(self.now, BackendPlan) else None

    @property
    def spmd(self) -> SpmdCells | None:
        """Plain cells as SPMD cells (``%gpurun spmd``), if they run so."""
        return self.now if isinstance(self.now, SpmdCells) else None

    # -- choosing where plain cells run ----------------------------------------------------------------------
    def use(self, plan: BackendPlan) -> None:
        """Run plain cells on ``plan`` from now on (ending where they ran before)."""
        self.end()
        self.now = plan
        self._apply()
        _mark_cluster(plan)

    def use_spmd(self, options: str) -> SpmdCells:
        """Run plain cells as SPMD cells with ``options`` from now on (ending where they ran before)."""
        self.end()
        self.now = made = SpmdCells(options)
        self.shell.input_transformers_cleanup.append(made.transform)
        return made

    def end(self) -> BackendPlan | SpmdCells | None:
        """Plain cells run here again, dask's settings as they were before the session; what ended."""
        ended, self.now = self.now, None
        self._unapply()
        if isinstance(ended, SpmdCells):
            with contextlib.suppress(ValueError):  # the user took the transformer away
                self.shell.input_transformers_cleanup.remove(ended.transform)
        elif ended is not None:
            backends.forget_closed_client(ended.client)
            _mark_cluster(None)
        return ended

    def _apply(self) -> None:
        plan = self.plan
        assert plan is not None
        stack = contextlib.ExitStack()
        stack.enter_context(dask.config.set(plan.config))
        stack.enter_context(plan.client_calls())
        self._applied = stack

    def _unapply(self) -> None:
        applied, self._applied = self._applied, None
        if applied is not None:
            applied.close()

    @contextlib.contextmanager
    def suspended(self) -> Iterator[None]:
        """Without the session's settings for the block (a ``%%gpurun`` cell runs its own backend)."""
        if self._applied is None:
            yield
            return
        self._unapply()
        try:
            yield
        finally:
            if self.plan is not None and self._applied is None:
                self._apply()

    # -- around each plain cell ------------------------------------------------------------------------------
    @said_in_one_line
    def before_cell(self, info: Any) -> None:
        """IPython's ``pre_run_cell``: the chunk-type notes, annotations and, with the summary on, recording."""
        plan = self.plan
        if plan is None or self._cell is not None:
            return
        raw = str(getattr(info, "raw_cell", "") or "")
        if _chooses_own_backend(raw):
            return
        source = getattr(info, "transformed_cell", None) or raw
        names = execute.names_read(source)
        for note in execute.chunk_mismatches(self.shell, names, plan):
            print(f"note: {note}")
        cell = _Cell(contextlib.ExitStack(), names)
        if plan.annotations:
            cell.stack.enter_context(dask.annotate(**plan.annotations))
        if self.settings.session_summary:
            cell.recorded = cell.stack.enter_context(
                task_count.recording(
                    plan.client, split=plan.splits_time, gpu=plan.chunk_type == "cupy", workers=plan.worker_count
                )
            )
            cell.began = time.perf_counter()
            cell.gathered = kernel_tail.gathered()
        self._cell = cell

    @said_in_one_line
    def after_cell(self, result: Any) -> None:
        """IPython's ``post_run_cell``: the summary, and after an interrupt on a cluster what still runs there."""
        cell, self._cell = self._cell, None
        plan = self.plan
        error = getattr(result, "error_in_exec", None)
        if cell is None:
            return
        wall = 0.0
        if cell.recorded is not None:
            if (
                plan is not None
                and error is None
                and not kernel_tail.results_gathered(cell.recorded.settled(), cell.gathered)
            ):
                try:
                    plan.synchronize()
                except RuntimeError as failure:  # CuPy's CUDA errors (a cluster's are let go by the plan): timed anyway
                    dropped("synchronizing after a plain cell", failure)
            wall = time.perf_counter() - cell.began
        with contextlib.suppress(ValueError):  # an annotation set in another context (an async cell)
            cell.stack.close()
        if plan is None:
            return
        if cell.recorded is not None and cell.recorded.tasks:
            self._show_summary(plan, cell, wall, failed=error is not None)
        self.settings.after_session_cell(plan, error if isinstance(error, BaseException) else None)

    def _show_summary(self, plan: BackendPlan, cell: _Cell, wall: float, *, failed: bool) -> None:
        from IPython.display import display

        recorded = cell.recorded
        assert recorded is not None
        split = None if failed else recorded.split
        cold = execute.first_run_on(plan)
        display(
            RunResult(
                backend=plan.name,
                hardware=plan.hardware,
                times=(wall,),
                tasks=recorded.tasks,
                failed=failed,
                split=split,
                advice=None if split is None else advice.advice_for(self.shell, cell.names, plan, split, cold=cold),
            )
        )


def _chooses_own_backend(raw_cell: str) -> bool:
    """Whether the cell is a ``%%gpurun`` cell (it runs its own backend) or a ``%gpurun`` line (it changes this
    one): the session leaves such cells alone."""
    first = raw_cell.lstrip().split("\n", 1)[0].strip()
    return first.startswith(("%%gpurun", "%gpurun"))


def _mark_cluster(plan: BackendPlan | None) -> None:
    """Tell the cluster in use (its record, the side panel's card) which backend plain cells use, on the cluster
    or here (as ``%gpucluster status`` says it)."""
    from gpu_magics.cluster.control import queries

    queries.tell_plain_cells(None if plan is None else plan.name)


def for_shell(shell: InteractiveShell, settings: SessionSettings | None = None) -> Session:
    """The shell's session (made on first use, with ``settings``)."""
    found = getattr(shell, _KEY, None)
    if isinstance(found, Session):
        return found
    if settings is None:
        raise RuntimeError("the session backend needs the GpuMagics settings on first use")
    made = Session(shell, settings)
    setattr(shell, _KEY, made)
    shell.events.register("pre_run_cell", made.before_cell)
    shell.events.register("post_run_cell", made.after_cell)
    return made


def current(shell: InteractiveShell | None) -> Session | None:
    """The shell's session, if one was made."""
    found = getattr(shell, _KEY, None) if shell is not None else None
    return found if isinstance(found, Session) else None


def uninstall(shell: InteractiveShell) -> None:
    """End the session and remove its hooks (``%unload_ext``), and the plain cells' progress line's."""
    from gpu_magics.display.objects import array_view
    from gpu_magics.gpurun.live import plain_progress

    array_view.set_placement_probe(None)
    plain_progress.uninstall(shell)
    made = current(shell)
    if made is None:
        return
    made.end()
    made._stop_listening()
    for event, callback in (("pre_run_cell", made.before_cell), ("post_run_cell", made.after_cell)):
        with contextlib.suppress(ValueError):
            shell.events.unregister(event, callback)
    delattr(shell, _KEY)


def install(shell: InteractiveShell) -> None:
    """At ``%load_ext``: the array display says where an array is computed as this shell's session stands, and a
    plain cell the cluster works for long shows its progress (``live.plain_progress``)."""
    from gpu_magics.display.objects import array_view
    from gpu_magics.gpurun.live import plain_progress
    from gpu_magics.gpurun.session import placement

    def spmd_cells() -> bool:  # SPMD cells show their ranks' table
        made = current(shell)
        return made is not None and made.spmd is not None

    plain_progress.install(shell, spmd_cells)

    def computed_on(chunk_library: str) -> tuple[str, str | None] | None:
        made = current(shell)
        found = placement.for_array(None if made is None else made.plan, chunk_library)
        return None if found is None else (found.where, found.fix)

    array_view.set_placement_probe(computed_on)
