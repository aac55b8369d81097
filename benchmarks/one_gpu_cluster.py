"""Where a one-GPU cluster's time goes, beside the ``gpu`` backend on the same GPU (the seed workload).

In one process on GPU 0: ``%%gpurun gpu`` (dask's threads), then ``%gpucluster`` with each
variant given, each timed as a ``%%gpurun multi-gpu`` cell (median of ``--repeat``). For the cluster runs it splits one
run with distributed's task stream: from the call to the first task starting (graph to the scheduler and to the
worker), the tasks' span on the worker, and from the last task's end to the result in the kernel.

    python benchmarks/one_gpu_cluster.py [--n 100000] [--chunk 10000] [--repeat 7]
        [--variants "--threads-per-worker 4;--threads-per-worker 8"]
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output

SEED = "x = da.random.normal(10, 1, size=({n}, {n}), chunks={chunk})\n(x + 1)[::2, ::2].mean().compute()\n"


def timed(shell: Any, backend: str, cell: str, repeat: int) -> list[float]:
    times = []
    for _ in range(repeat + 1):  # the first is a warm-up
        began = time.perf_counter()
        with capture_output():
            shell.run_cell_magic("gpurun", f"{backend} -q --no-monitor", cell)
        times.append(time.perf_counter() - began)
    return times[1:]


def split_one_run(shell: Any, cell: str) -> dict[str, float]:
    from gpu_magics.cluster.control import queries

    client = queries.require_client()
    from distributed import get_task_stream

    with get_task_stream(client) as recorded:
        began = time.time()
        with capture_output():
            shell.run_cell_magic("gpurun", "multi-gpu -q --no-monitor", cell)
        ended = time.time()
    stream = recorded.data
    starts = [part["start"] for task in stream for part in task["startstops"] if part["action"] == "compute"]
    stops = [part["stop"] for task in stream for part in task["startstops"] if part["action"] == "compute"]
    busy = sum(part["stop"] - part["start"] for task in stream for part in task["startstops"])
    return {
        "call_to_first_task_s": min(starts) - began,
        "task_span_s": max(stops) - min(starts),
        "last_task_to_result_s": ended - max(stops),
        "tasks": float(len(stream)),
        "busy_s": busy,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--chunk", type=int, default=10_000)
    parser.add_argument(
        "--variants",
        default="--threads-per-worker 4;--threads-per-worker 8",
        help="%%gpucluster options of each cluster to try, separated by ';'",
    )
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    cell = SEED.format(n=args.n, chunk=args.chunk)
    shell = InteractiveShell.instance()
    shell.run_line_magic("load_ext", "gpu_magics")
    shell.run_cell("import dask, dask.array as da", store_history=False)
    rows = [("gpu backend", statistics.median(timed(shell, "gpu", cell, args.repeat)), None)]
    for variant in [v.strip() for v in args.variants.split(";") if v.strip()]:
        with capture_output():
            shell.run_line_magic("gpucluster", f"--gpus 0 {variant} --no-dashboard --replace")
        median = statistics.median(timed(shell, "multi-gpu", cell, args.repeat))
        rows.append((f"1-GPU cluster {variant}", median, split_one_run(shell, cell)))
    with capture_output():
        shell.run_line_magic("gpucluster", "stop")
    base = rows[0][1]
    print(f"seed {args.n}^2 in {args.chunk}^2 chunks, median of {args.repeat} warm runs")
    for name, median, split in rows:
        line = f"{name:60s} {median:7.3f} s  x{median / base:5.2f}"
        if split:
            line += (
                f"  call->first task {split['call_to_first_task_s'] * 1e3:6.1f} ms, task span "
                f"{split['task_span_s'] * 1e3:6.1f} ms, last task->result {split['last_task_to_result_s'] * 1e3:6.1f}"
                f" ms, {split['tasks']:.0f} tasks, worker busy {split['busy_s']:.2f} s"
            )
        print(line)


if __name__ == "__main__":
    main()
