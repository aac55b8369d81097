"""Plain cells on the session backend (``%gpurun BACKEND``) against the same cell under ``%%gpurun BACKEND``, and
plain dask, in one kernel: the seed workload, then what a cell that computes nothing pays.

    python benchmarks/session_backend.py                      # 100000^2 float64 in 10000^2 chunks (80 GB), 1 GPU
    python benchmarks/session_backend.py --n 4000 --chunk 1000 --cpu-workers 2     # tiny, without a GPU

Everything runs in one real IPython shell, as a notebook meets it: ``%load_ext gpu_magics``, ``%gpucluster`` (one
GPU worker, or ``--cpu-workers``), then per round, interleaved: the cell under ``%%gpurun multi-gpu -q``; the same
plain cell after ``%gpurun multi-gpu``; the plain cell with dask's own settings and ``array.backend`` set by hand
(what a user had before). Then the same for ``gpu`` (one GPU, no cluster; ``cpu-threads`` without a GPU). Medians of
``--repeat`` rounds after one warm-up round. The target: the session's plain cell within 1.05x of the ``%%gpurun``
cell. Last, the median cost of an empty cell: plain, plain in a session, and an empty ``%%gpurun`` cell.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from IPython.utils.capture import capture_output

TARGET = 1.05
SEED = (
    "import dask.array as da\n"
    "x = da.random.normal(10, 1, size=({n}, {n}), chunks={chunk})\n"
    "r = float((x + 1)[::2, ::2].mean().compute())\n"
)


def timed(shell: Any, code: str) -> float:
    began = time.perf_counter()
    result = shell.run_cell(code)
    took = time.perf_counter() - began
    if not result.success:
        raise RuntimeError(f"the cell failed: {result.error_in_exec or result.error_before_exec}")
    return took


def rounds(repeat: int, setups: dict[str, Callable[[], float]]) -> dict[str, list[float]]:
    """One warm-up round, then ``repeat`` rounds, each running every setup once (interleaved)."""
    for run in setups.values():
        run()
    times: dict[str, list[float]] = {name: [] for name in setups}
    for _ in range(repeat):
        for name, run in setups.items():
            times[name].append(run())
    return times


def magic(shell: Any, name: str, line: str) -> None:
    """A line magic, its printed lines kept out of the benchmark's output."""
    with capture_output():
        shell.run_line_magic(name, line)


def compare(shell: Any, backend: str, cell: str, chunk_backend: str, repeat: int) -> dict[str, Any]:
    import dask

    def in_gpurun_cell() -> float:
        return timed(shell, f"%%gpurun {backend} -q\n{cell}")

    def in_session() -> float:
        magic(shell, "gpurun", backend)
        try:
            return timed(shell, cell)
        finally:
            magic(shell, "gpurun", "off")

    def plain_dask() -> float:
        with dask.config.set({"array.backend": chunk_backend}):
            return timed(shell, cell)

    times = rounds(
        repeat,
        {
            f"%%gpurun {backend} cell": in_gpurun_cell,
            f"%gpurun {backend}, plain cell": in_session,
            f"plain cell, dask's settings, array.backend={chunk_backend}": plain_dask,
        },
    )
    medians = {name: statistics.median(values) for name, values in times.items()}
    cell_s, session_s = medians[f"%%gpurun {backend} cell"], medians[f"%gpurun {backend}, plain cell"]
    return {
        "backend": backend,
        "medians_s": {name: round(value, 4) for name, value in medians.items()},
        "all_s": {name: [round(value, 4) for value in values] for name, values in times.items()},
        "session_over_cell": round(session_s / cell_s, 3),
        "value": shell.user_ns["r"],
    }


def empty_cells(shell: Any, backend: str, count: int = 200) -> dict[str, float]:
    """Median microseconds of an empty cell: plain, plain in a session, and an empty ``%%gpurun`` cell."""

    def median_us(code: str) -> float:
        return round(statistics.median(timed(shell, code) for _ in range(count)) * 1e6, 1)

    found = {"plain": median_us("pass")}
    magic(shell, "gpurun", backend)
    found[f"plain, %gpurun {backend}"] = median_us("pass")
    magic(shell, "gpurun", "off")
    found[f"%%gpurun {backend} -q"] = median_us(f"%%gpurun {backend} -q\npass")
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=100_000, help="array side (default 100000: 80 GB)")
    parser.add_argument("--chunk", type=int, default=10_000, help="chunk side (default 10000)")
    parser.add_argument("--repeat", type=int, default=7, help="rounds (medians reported)")
    parser.add_argument("--cpu-workers", type=int, default=0, help="CPU workers instead of a GPU (no GPU needed)")
    parser.add_argument("--json", type=Path, help="also write the results here")
    parser.add_argument("--empty-only", action="store_true", help="only the empty cells (median of --count)")
    parser.add_argument("--count", type=int, default=200, help="empty cells per median")
    args = parser.parse_args()

    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    shell.run_line_magic("load_ext", "gpu_magics")
    cell = SEED.format(n=args.n, chunk=args.chunk)
    chunks = "numpy" if args.cpu_workers else "cupy"
    magic(shell, "gpucluster", f"--cpu-workers {args.cpu_workers}" if args.cpu_workers else "--gpus 0")
    results = [] if args.empty_only else [compare(shell, "multi-gpu", cell, chunks, args.repeat)]
    empty = {"multi-gpu": empty_cells(shell, "multi-gpu", args.count)}
    magic(shell, "gpucluster", "stop")
    local = "cpu-threads" if args.cpu_workers else "gpu"
    if not args.empty_only:
        results.append(compare(shell, local, cell, chunks, args.repeat))
    empty[local] = empty_cells(shell, local, args.count)
    if local != "cpu-threads":
        empty["cpu-threads"] = empty_cells(shell, "cpu-threads", args.count)

    print(f"seed workload {args.n}^2 float64 in {args.chunk}^2 chunks; medians of {args.repeat} interleaved rounds")
    for result in results:
        for name, value in result["medians_s"].items():
            print(f"  {name:<58} {value:8.3f} s")
        verdict = "<=" if result["session_over_cell"] <= TARGET else ">"
        print(
            f"  {result['backend']}: session / cell = {result['session_over_cell']} ({verdict} {TARGET}); "
            f"value {result['value']:.5f}"
        )
    print("empty cell, median us:", json.dumps(empty))
    if args.json:
        args.json.write_text(json.dumps({"results": results, "empty_cell_us": empty}, indent=1))


if __name__ == "__main__":
    main()
