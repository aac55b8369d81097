"""Running a cell on a backend: compile it like IPython does, time it to the end of the GPU work, compare values."""

from __future__ import annotations

import ast
import re
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
from IPython.core.interactiveshell import InteractiveShell

from gpu_magics.gpurun.backends import BackendPlan
from gpu_magics.gpurun.graphs import kernel_tail
from gpu_magics.gpurun.live import cluster_loss
from gpu_magics.gpurun.results import CompareResult, CompareRow, RunResult
from gpu_magics.gpurun.timing import advice, task_count
from gpu_magics.text.errors import CellError
from gpu_magics.text.units import dropped

if TYPE_CHECKING:
    from distributed import Client


@dataclass(frozen=True)
class CompiledCell:
    """A cell ready to run: its statements and, separately, its last expression (whose value is the result)."""

    body: Any  # code object for every statement but a trailing expression
    last_expression: Any  # code object (eval mode) or None
    names: frozenset[str]  # names the cell reads and does not assign (collections made before the cell)
    silent: bool  # the cell ends with ';'
    bound: frozenset[str] = frozenset()  # names the cell assigns


class CellObserver(Protocol):
    """Watches one backend's run of a cell (the live GPU monitor does)."""

    def start(self, plan: BackendPlan) -> None: ...

    def stop(self) -> Any: ...


def compile_cell(shell: InteractiveShell, cell: str) -> CompiledCell | None:
    """Transform and compile ``cell`` as IPython would; shows a syntax error and returns ``None`` on one."""
    source = _transformed(shell, cell)
    filename = shell.compile.cache(source, shell.execution_count, raw_code=cell)
    try:
        module = shell.compile.ast_parse(source, filename=filename)
        module = shell.transform_ast(module)
    except SyntaxError:
        shell.showsyntaxerror(filename)
        return None
    assert isinstance(module, ast.Module)
    if has_top_level_await(module):
        raise CellError(TOP_LEVEL_AWAIT)
    statements = list(module.body)
    last = None
    if statements and isinstance(statements[-1], ast.Expr):
        last = ast.Expression(statements[-1].value)
        statements.pop()
    names, bound = _names_from_outside(module)
    compiler: Any = shell.compile  # CachingCompiler accepts AST nodes too
    body = compiler(ast.Module(statements, type_ignores=[]), filename, "exec")
    expression = compiler(last, filename, "eval") if last is not None else None
    silent = bool(shell.displayhook.semicolon_at_end_of_expression(source))
    return CompiledCell(body=body, last_expression=expression, names=names, silent=silent, bound=bound)


_TRANSFORMED_KEPT = 64  # the last cells' transformed sources (a notebook runs the same cells again and again)
_transformed_sources: dict[tuple[Any, ...], str] = {}


def _transformed(shell: InteractiveShell, cell: str) -> str:
    """``shell.transform_cell(cell)``, kept for the same text and the same input transformers: the cell's text
    was transformed once by IPython already (as the magic's argument), and tokenizing it again is most of what a
    small cell costs here."""
    manager = shell.input_transformer_manager
    key = (
        cell,
        id(shell),
        tuple(map(id, manager.cleanup_transforms)),
        tuple(map(id, manager.line_transforms)),
        tuple(map(id, manager.token_transformers)),
        tuple(map(id, shell.input_transformers_post)),
    )
    source = _transformed_sources.pop(key, None)
    if source is None:
        source = shell.transform_cell(cell)
        while len(_transformed_sources) >= _TRANSFORMED_KEPT:
            del _transformed_sources[next(iter(_transformed_sources))]
    _transformed_sources[key] = source  # the most recent last
    return source


TOP_LEVEL_AWAIT = (
    "%%gpurun runs its cell synchronously, so top-level await (await, async for, async with) cannot run in it; "
    "call the blocking form instead (.compute(), client.gather(futures)), or run this cell without %%gpurun"
)
_ASYNC_NODES = (ast.Await, ast.AsyncFor, ast.AsyncWith)
_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)


WARM_UP_LIMIT = 10.0  # seconds: a --compare backend whose first run is shorter runs again, timed warm
_ran_on: set[tuple[str, int | None, tuple[int, ...]]] = set()  # the backends (and clusters) a cell has run on


def _backend_key(plan: BackendPlan) -> tuple[str, int | None, tuple[int, ...]]:
    return (plan.name, None if plan.client is None else id(plan.client), tuple(plan.gpu_indices))


def first_run_on(plan: BackendPlan) -> bool:
    """Whether a cell runs on ``plan``'s backend (and cluster) for the first time in this kernel: that run
    pays start-up costs (imports, first CUDA use). Notes the run, so the next one is not the first."""
    key = _backend_key(plan)
    first = key not in _ran_on
    _ran_on.add(key)
    return first


def has_top_level_await(module: ast.Module) -> bool:
    """Whether the cell awaits outside any function (IPython would run such a cell as a coroutine)."""
    pending: list[ast.AST] = list(module.body)
    while pending:
        node = pending.pop()
        if isinstance(node, _ASYNC_NODES):
            return True
        if not isinstance(node, _SCOPES):
            pending.extend(ast.iter_child_nodes(node))
    return False


def names_read(source: str) -> frozenset[str]:
    """The names a cell's (transformed) source reads without binding them; empty when it does not parse."""
    try:
        module = ast.parse(source)
    except (SyntaxError, ValueError):
        return frozenset()
    return _names_from_outside(module)[0]


def _names_from_outside(module: ast.Module) -> tuple[frozenset[str], frozenset[str]]:
    """Names the cell reads but never binds itself (what it takes from before the cell), and names it binds."""
    read: set[str] = set()
    bound: set[str] = set()
    for node in ast.walk(module):
        if isinstance(node, ast.Name):
            (read if isinstance(node.ctx, ast.Load) else bound).add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            bound.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
    return frozenset(read - bound), frozenset(bound)


@dataclass
class Outcome:
    """What running a cell once gave: its value, or the exception it raised (whose traceback was shown)."""

    value: Any = None
    error: BaseException | None = None

    @property
    def failed(self) -> bool:
        return self.error is not None

    @property
    def interrupted(self) -> bool:
        return isinstance(self.error, KeyboardInterrupt)


def run_once(
    shell: InteractiveShell,
    cell: CompiledCell,
    client: Client | None = None,
    explain: Callable[[BaseException], str | None] | None = None,
) -> Outcome:
    """Run the cell in the user namespace; a user exception shows the user's traceback, not ours. ``client`` is
    the cluster's client the cell runs on (``multi-gpu``), if any; ``explain`` gives one line instead of the
    traceback for errors the backend's set-up explains."""
    try:
        exec(cell.body, shell.user_global_ns, shell.user_ns)
        value = None
        if cell.last_expression is not None:
            value = eval(cell.last_expression, shell.user_global_ns, shell.user_ns)
    except (Exception, KeyboardInterrupt) as error:  # the user's code: any error is the cell's result
        unsendable = unpicklable_reason(error)
        if unsendable is not None:  # one line, not distributed's chain of serialization attempts
            print(f"{type(error).__name__}: {unsendable}", file=sys.stderr)
            return Outcome(error=error)
        explained = explain(error) if explain is not None else None
        if explained is not None:
            print(explained, file=sys.stderr)
            return Outcome(error=error)
        lost = _lost_cluster(error, client)
        if lost is not None:  # one line, not "cancelled for reason: unknown" from inside the client
            print(lost, file=sys.stderr)
            return Outcome(error=error)
        # Drop this frame from the traceback: the user sees only the cell's own frames.
        user_frames = error.__traceback__.tb_next if error.__traceback__ is not None else None
        shell.showtraceback((type(error), error.with_traceback(user_frames), user_frames), tb_offset=0)
        return Outcome(error=error)
    return Outcome(value=value)


def _lost_cluster(error: BaseException, client: Client | None) -> str | None:
    if client is None:
        return None
    from gpu_magics.cluster.control import queries

    return cluster_loss.lost_cluster_message(error, client, queries.active_client())


_CANNOT_PICKLE = re.compile(r"cannot pickle '([^']+)' object")


def unpicklable_reason(error: BaseException) -> str | None:
    """For an error from sending the cell's tasks to a cluster (distributed could not serialize the graph), one
    line naming the object that cannot travel; ``None`` for any other error."""
    if "Could not serialize object" not in str(error):
        return None
    chain: list[BaseException] = []
    current: BaseException | None = error
    while current is not None and len(chain) < 20:
        chain.append(current)
        current = current.__cause__ or current.__context__
    for cause in reversed(chain):
        found = _CANNOT_PICKLE.search(str(cause))
        if found:
            return (
                f"a task of this cell holds a {found.group(1)} object, which cannot be sent to the workers; "
                "make it inside the task, or pass the data it holds instead"
            )
    return "a task of this cell holds an object that cannot be sent to the workers (it does not pickle)"


def mark_failed(shell: InteractiveShell, error: BaseException) -> None:
    """Make the running cell count as failed, as a plain cell that raised does (Jupyter's reply is "error",
    so Run All, nbclient and papermill stop), without showing a second traceback."""
    result = getattr(shell.displayhook, "exec_result", None)
    if result is not None and result.error_in_exec is None:
        result.error_in_exec = error


def run_on_backend(
    shell: InteractiveShell,
    cell: CompiledCell,
    plan: BackendPlan,
    *,
    repeat: int = 1,
    observer: CellObserver | None = None,
    notes: Sequence[str] = (),
    warm_up: float | None = None,
) -> tuple[RunResult, Outcome]:
    """Run the cell ``repeat`` times on ``plan``; each wall time ends after the backend's GPU work is done.

    With ``warm_up`` (seconds), the first run is a warm-up when it took less than that: it is not timed, and
    ``repeat`` runs follow, so first-call costs (imports, CUDA context, thread pools) stay out of the figures;
    a longer first run is kept as a timed one and the result says it ran cold."""
    times: list[float] = []
    outcome = Outcome()
    tasks: int | None = 0
    split = None
    cold_run: float | None = None
    cold = False
    first_here = first_run_on(plan)  # its first run pays start-up costs
    if observer is not None:
        observer.start(plan)
    began = time.perf_counter()
    try:
        with plan.activate():
            warming = warm_up is not None
            while len(times) < repeat:
                with task_count.recording(
                    plan.client, split=plan.splits_time, gpu=plan.chunk_type == "cupy", workers=plan.worker_count
                ) as recorded:
                    start = time.perf_counter()
                    gathered = kernel_tail.gathered()
                    outcome = run_once(shell, cell, plan.client, plan.explain_error)
                    # no task, or every task's result gathered here: no GPU work queued to wait for
                    if (
                        not outcome.failed
                        and recorded.ran_tasks()
                        and not kernel_tail.results_gathered(recorded.settled(), gathered)
                    ):
                        try:
                            plan.synchronize()
                        except KeyboardInterrupt as error:
                            outcome = Outcome(error=error)
                    elapsed = time.perf_counter() - start
                if warming and not outcome.failed:
                    warming = False
                    if warm_up is not None and elapsed < warm_up:
                        cold_run = elapsed  # the warm-up: not timed
                        continue
                    cold = True  # too long to run twice: timed, and said to be cold
                times.append(elapsed)
                tasks = None if tasks is None or recorded.tasks is None else tasks + recorded.tasks
                if recorded.split is not None and (split is None or times[-1] <= min(times)):
                    split = recorded.split  # the split of the best run, the one the summary quotes
                if outcome.failed:
                    break
    except KeyboardInterrupt as error:  # between two runs, in this package's code: the cell's interrupt, one line
        outcome = Outcome(error=error)
        shell.showtraceback((type(error), error.with_traceback(None), None), tb_offset=0)
        times = times or [time.perf_counter() - began]  # the runs timed so far; else the interrupted one's time
    finally:
        figures = observer.stop() if observer is not None else None
    if tasks is not None and len(times) > 1:
        tasks //= len(times)
    timed_cold = first_here and cold_run is None and len(times) == 1
    result = RunResult(
        backend=plan.name,
        hardware=plan.hardware,
        times=tuple(times),
        tasks=tasks or None,
        notes=(*plan.notes, *notes),
        failed=outcome.failed,
        monitor=figures,
        split=None if outcome.failed else split,
        cold_run=cold_run,
        cold=cold,
        advice=None
        if outcome.failed or split is None
        else advice.advice_for(shell, cell.bound | cell.names, plan, split, cold=timed_cold),
    )
    return result, outcome


def chunk_mismatches(shell: InteractiveShell, names: Iterable[str], plan: BackendPlan) -> list[str]:
    """Notes for the dask collections among ``names`` (what a cell reads) whose chunk type does not match the
    backend's (none where the chunks are made on the workers whatever the metadata here says)."""
    notes: list[str] = []
    if plan.remote_chunks:
        return notes
    for name in sorted(names):
        value = shell.user_ns.get(name)
        meta = getattr(value, "_meta", None)
        if meta is None or not hasattr(value, "__dask_graph__"):
            continue
        module = type(meta).__module__.split(".")[0]
        if plan.chunk_type == "cupy" and module == "numpy":
            notes.append(
                f"{name} has numpy chunks, so {plan.name} computes it on the CPU; "
                f'convert it once with {name} = {name}.to_backend("cupy")'
            )
        elif plan.chunk_type == "numpy" and module == "cupy":
            notes.append(
                f"{name} has cupy chunks, so {plan.name} computes it on a GPU; "
                f'convert it with {name}.to_backend("numpy") to use the CPU'
            )
    return notes


def to_host(value: Any) -> Any:
    """``value`` with CuPy arrays copied to NumPy, recursively through tuples, lists and dicts."""
    if isinstance(value, (tuple, list)):
        return type(value)(to_host(item) for item in value)
    if isinstance(value, dict):
        return {key: to_host(item) for key, item in value.items()}
    if type(value).__module__.split(".")[0] == "cupy" and hasattr(value, "get"):
        return value.get()
    return value


def agreement(reference: Any, value: Any, rtol: float) -> str:
    """How ``value`` compares with ``reference``: ``agrees``, ``differs (...)`` or why it was not compared."""
    if reference is None and value is None:
        return "no value to compare"
    if hasattr(value, "__dask_graph__") or hasattr(reference, "__dask_graph__"):
        return "not compared (lazy dask collection: end the cell with .compute())"
    reference, value = to_host(reference), to_host(value)
    try:
        left, right = np.asarray(reference), np.asarray(value)
        if left.dtype.kind in "biufc" and right.dtype.kind in "biufc":
            if left.shape != right.shape:
                return f"differs (shape {left.shape} vs {right.shape})"
            if np.allclose(left, right, rtol=rtol, atol=0, equal_nan=True):
                return "agrees"
            scale = np.maximum(np.abs(left), np.finfo(np.float64).tiny)
            worst = float(np.max(np.abs(left - right) / scale))
            return f"differs (max relative difference {worst:.2g} > rtol {rtol:g})"
        equal = reference == value
        return "agrees" if bool(np.all(equal)) else "differs"
    except Exception as error:  # any failure is said in the row (not compared)
        dropped("comparing two results", error)
        return f"not compared ({type(error).__name__})"


def compare_rows(results: Sequence[tuple[RunResult, Outcome]], rtol: float) -> CompareResult:
    """The comparison table: speed-up against the first backend and agreement with its value."""
    rows = []
    reference_result, reference_outcome = results[0]
    for position, (result, outcome) in enumerate(results):
        if result.failed:
            rows.append(CompareRow(result, None, "failed"))
            continue
        speedup = reference_result.wall_time / result.wall_time if not reference_result.failed else None
        if position == 0:
            rows.append(CompareRow(result, 1.0, "reference"))
        else:
            rows.append(CompareRow(result, speedup, agreement(reference_outcome.value, outcome.value, rtol)))
    return CompareResult(tuple(rows))
