"""Where a cell's fixed time goes: one ``%%gpurun`` cell split into its steps, in the kernel and on the workers.

    python benchmarks/cell_breakdown.py                                  # 1 GPU: gpu, and a one-worker %gpucluster
    python benchmarks/cell_breakdown.py --cpu-workers 1 --n 2000 --chunk 500    # no GPU: cpu-threads, CPU worker

Everything runs in one real IPython shell, as a notebook meets it: ``%load_ext gpu_magics``, ``%gpucluster`` (one
GPU worker, or ``--cpu-workers``), then per round, interleaved: an empty plain cell, an empty ``%%gpurun LOCAL -q``
and ``%%gpurun multi-gpu -q`` cell (``--count`` of each), the seed (``session_backend.SEED``) as a ``%%gpurun LOCAL``
cell and as a ``%%gpurun multi-gpu`` cell. LOCAL is ``gpu`` on a GPU, ``cpu-threads`` with ``--cpu-workers``.

Each cell's time is cut at moments read in this process (the magic's entry and exit, the cell's compile, the monitor's
start and stop, the cell's code, a graph's submit through ``Client``) and on the schedulers (the package's task counter
on the cluster: a graph's arrival, each task's compute start and stop; a dask callback on the local schedulers), all
in one clock. The steps between consecutive moments add up to the cell's wall time. After one warm-up round: the
cell's median, and each step's mean over the runs of middle wall time (the middle quarter), which add up to it;
``--json`` writes every run's wall time.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from IPython.utils.capture import capture_output

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.session_backend import SEED, magic

GATHER = "gather: the result's way back"
CODE_STEP = "cell: its code, graph build and optimization"
# The moments a cell passes, in order, and the step each one ends (the first step begins as run_cell is called).
STEPS: tuple[tuple[str, str], ...] = (
    ("magic_in", "IPython before the magic (transform, AST transformers, dispatch)"),
    ("compile_in", "magic: parse the line, plan the backend"),
    ("compile_out", "magic: compile the cell"),
    ("monitor_in", "magic: notes, observer, run set-up"),
    ("monitor_out", "monitor: start"),
    ("body_in", "timing: backend config, task counter mark"),
    ("submit", CODE_STEP),
    ("arrived", "submit: the graph to the scheduler, taken in"),
    ("first_task", "scheduler: until the first task starts"),
    ("last_task", "tasks: first start to last end"),
    ("body_out", GATHER),
    ("stop_in", "timing: wait for the GPUs, task counts, split"),
    ("stop_out", "monitor: stop"),
    ("backend_out", "result, advice"),
    ("magic_out", "summary, after the cell"),
    ("end", "IPython after the magic (display hook, history)"),
)
PLAIN_STEP = "plain cell (IPython alone)"


class Moments:
    """The moments of the cell that runs now, in ``time.time()``; hooks note them while ``collecting``."""

    def __init__(self) -> None:
        self.seen: dict[str, float] = {}
        self.collecting = False

    def note(self, name: str, first: bool = True) -> None:
        if self.collecting and (not first or name not in self.seen):
            self.seen[name] = time.time()


def _wrapped(moments: Moments, function: Callable[..., Any], before: str, after: str) -> Callable[..., Any]:
    def call(*args: Any, **kwargs: Any) -> Any:
        moments.note(before)
        try:
            return function(*args, **kwargs)
        finally:
            moments.note(after, first=False)

    return call


@contextlib.contextmanager
def hooks(shell: Any, moments: Moments) -> Iterator[None]:
    """Hooks at the moments ``STEPS`` names, on the magic, its engine, ``Client`` and dask's local schedulers."""
    import dask.local
    import dask.threaded
    from dask.callbacks import Callback
    from distributed import Client

    from gpu_magics.gpurun import execute
    from gpu_magics.gpurun.live.cell_monitor import CellMonitor

    class LocalScheduler(Callback):
        def _start(self, dsk: Any) -> None:
            moments.note("arrived")

        def _pretask(self, key: Any, dsk: Any, state: Any) -> None:
            moments.note("first_task")

        def _posttask(self, key: Any, result: Any, dsk: Any, state: Any, worker_id: Any) -> None:
            moments.note("last_task", first=False)

    cells = shell.magics_manager.magics["cell"]
    replaced: list[tuple[Any, str, Any]] = [
        (cells, "gpurun", cells["gpurun"]),
        (execute, "compile_cell", execute.compile_cell),
        (execute, "run_on_backend", execute.run_on_backend),
        (execute, "run_once", execute.run_once),
        (CellMonitor, "start", CellMonitor.start),
        (CellMonitor, "stop", CellMonitor.stop),
        (Client, "_graph_to_futures", Client._graph_to_futures),
        (dask.local, "get_async", dask.local.get_async),
        (dask.threaded, "get_async", dask.threaded.get_async),
    ]
    cells["gpurun"] = _wrapped(moments, cells["gpurun"], "magic_in", "magic_out")
    for owner, name, before, after in (
        (execute, "compile_cell", "compile_in", "compile_out"),
        (execute, "run_on_backend", "backend_in", "backend_out"),
        (execute, "run_once", "body_in", "body_out"),
        (CellMonitor, "start", "monitor_in", "monitor_out"),
        (CellMonitor, "stop", "stop_in", "stop_out"),
        (Client, "_graph_to_futures", "submit", "submitted"),
        (dask.local, "get_async", "submit", "submitted"),  # the local schedulers' (synchronous, threads)
        (dask.threaded, "get_async", "submit", "submitted"),
    ):
        setattr(owner, name, _wrapped(moments, getattr(owner, name), before, after))
    local = LocalScheduler()
    local.register()
    try:
        yield
    finally:
        local.unregister()
        for owner, name, original in replaced:
            if isinstance(owner, dict):
                owner[name] = original
            else:
                setattr(owner, name, original)


def _cluster_moments(client: Any, mark: tuple[int, int, int, float] | None, moments: Moments) -> None:
    """The graph's arrival and the tasks' first start and last end, from the package's task counter on the
    scheduler (read after the cell, outside its time); the scheduler and the workers run on this host: one clock."""
    from gpu_magics.gpurun.timing import task_count

    if mark is None:
        return
    after = client.run_on_scheduler(task_count.read_since, records=mark[1], arrivals=mark[2])
    if after["arrivals"]:
        moments.seen["arrived"] = min(after["arrivals"])
    if after["records"]:
        moments.seen["first_task"] = min(record[1] for record in after["records"])
        moments.seen["last_task"] = max(record[2] for record in after["records"])


def steps_of(began: float, ended: float, seen: dict[str, float]) -> dict[str, float]:
    """Seconds per step: each step ends at its moment, moments not passed join the next step (one out of order is
    taken as the previous one);
    a cell that submitted no graph spends its code's time in ``CODE_STEP``."""
    steps: dict[str, float] = {}
    last = began
    for name, step in STEPS:
        at = ended if name == "end" else seen.get(name)
        if at is None:
            continue  # not passed: its time is the next step's
        at = min(max(at, last), ended)  # a worker's clock, corrected by distributed's estimate, may be off by a little
        if step == GATHER and "submit" not in seen:
            step = CODE_STEP
        steps[step] = steps.get(step, 0.0) + at - last
        last = at
    return steps


class Breakdown:
    """Runs cells in ``shell`` and splits each one's wall time into ``STEPS``."""

    def __init__(self, shell: Any) -> None:
        self.shell = shell
        self.moments = Moments()

    def run(self, code: str, client: Any = None) -> tuple[float, dict[str, float]]:
        """(the cell's wall time, its steps); ``client``: the cluster whose scheduler counts the cell's tasks."""
        from gpu_magics.gpurun.timing import task_count

        mark = task_count.scheduler_mark(client) if client is not None else None
        self.moments.seen = {}
        with capture_output():
            self.moments.collecting = True
            began = time.time()
            result = self.shell.run_cell(code)
            ended = time.time()
            self.moments.collecting = False
        if not result.success:
            raise RuntimeError(f"the cell failed: {result.error_in_exec or result.error_before_exec}")
        if client is not None:
            _cluster_moments(client, mark, self.moments)
        if "magic_in" not in self.moments.seen:
            return ended - began, {PLAIN_STEP: ended - began}
        return ended - began, steps_of(began, ended, self.moments.seen)


def summarize(runs: list[tuple[float, dict[str, float]]]) -> dict[str, Any]:
    """In ms: the cell's median wall time, and each step's mean (0 where a run did not pass it) over the runs of
    middle wall time (the middle quarter; with 3 runs the median one), so the steps add up to a middle of the cell's
    time where medians of skewed steps would not (a spike in one step of one run is left out)."""
    names = list(dict.fromkeys([step for _, step in STEPS] + [PLAIN_STEP]))
    found = [name for name in names if any(name in steps for _, steps in runs)]
    ordered = sorted(runs, key=lambda run: run[0])
    count = len(runs)
    middle = ordered[(count - 1) // 2 - count // 8 : count // 2 + 1 + count // 8]  # 3 runs: the median one
    steps = {name: statistics.fmean(steps.get(name, 0.0) for _, steps in middle) * 1e3 for name in found}
    wall = statistics.median(total for total, _ in runs) * 1e3
    return {
        "wall_ms": round(wall, 4),
        "steps_ms": {name: round(value, 4) for name, value in steps.items()},
        "sum_of_steps_ms": round(sum(steps.values()), 4),
        "middle_wall_ms": round(statistics.fmean(total for total, _ in middle) * 1e3, 4),  # what the steps add up to
        "runs": len(runs),
        "all_wall_ms": [round(total * 1e3, 4) for total, _ in runs],
    }


def cells(local: str, seed: str) -> dict[str, tuple[str, bool, int]]:
    """name -> (code, on the cluster, runs per round scale: 0 for once per round, 1 for ``--count``)."""
    return {
        "empty plain cell": ("pass", False, 1),
        f"empty %%gpurun {local} -q": (f"%%gpurun {local} -q\npass", False, 1),
        "empty %%gpurun multi-gpu -q": ("%%gpurun multi-gpu -q\npass", True, 1),
        f"seed %%gpurun {local}": (f"%%gpurun {local}\n{seed}", False, 0),
        "seed %%gpurun multi-gpu (one-worker %gpucluster)": (f"%%gpurun multi-gpu\n{seed}", True, 0),
    }


def measure(shell: Any, local: str, seed: str, repeat: int, count: int) -> dict[str, Any]:
    """One warm-up round, then ``repeat`` rounds, each running every cell (the empty ones ``count`` times)."""
    from gpu_magics.cluster.control import queries

    current = queries.in_use()
    client = None if current is None else current.client
    breakdown = Breakdown(shell)
    plan = cells(local, seed)
    runs: dict[str, list[tuple[float, dict[str, float]]]] = {name: [] for name in plan}
    with hooks(shell, breakdown.moments):
        for round_ in range(repeat + 1):
            for name, (code, on_cluster, scaled) in plan.items():
                for _ in range(count if scaled else 1):
                    found = breakdown.run(code, client if on_cluster else None)
                    if round_:
                        runs[name].append(found)
    return {name: summarize(found) for name, found in runs.items()}


def show(results: dict[str, Any]) -> None:
    plain = results["empty plain cell"]["wall_ms"]
    for name, result in results.items():
        over = "" if name == "empty plain cell" else f", {result['wall_ms'] - plain:+.3f} ms over an empty plain cell"
        print(f"{name}: {result['wall_ms']:.3f} ms median of {result['runs']}{over}")
        for step, value in result["steps_ms"].items():
            print(f"    {step:<66} {value:9.3f} ms")
        print(f"    {'(the steps added up)':<66} {result['sum_of_steps_ms']:9.3f} ms")


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=100_000, help="seed array side (default 100000: 80 GB)")
    parser.add_argument("--chunk", type=int, default=10_000, help="seed chunk side (default 10000)")
    parser.add_argument("--repeat", type=int, default=7, help="rounds after the warm-up (medians reported)")
    parser.add_argument("--count", type=int, default=30, help="empty cells of each kind per round")
    parser.add_argument("--cpu-workers", type=int, default=0, help="CPU backends and workers instead of a GPU")
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args(argv)

    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    shell.run_line_magic("load_ext", "gpu_magics")
    magic(shell, "gpucluster", f"--cpu-workers {args.cpu_workers}" if args.cpu_workers else "--gpus 0")
    local = "cpu-threads" if args.cpu_workers else "gpu"
    try:
        results = measure(shell, local, SEED.format(n=args.n, chunk=args.chunk), args.repeat, args.count)
    finally:
        magic(shell, "gpucluster", "stop")
    print(
        f"seed {args.n}^2 float64 in {args.chunk}^2 chunks, {args.repeat} interleaved rounds: each cell's median, "
        "each step's mean over the middle quarter of its runs by wall time"
    )
    show(results)
    if args.json:
        args.json.write_text(json.dumps({"n": args.n, "chunk": args.chunk, "local": local, "cells": results}, indent=1))
    return results


if __name__ == "__main__":
    main()
