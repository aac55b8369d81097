"""What start/cell/stop cycles leave in the kernel: ``%gpucluster --cpu-workers 2`` against plain ``LocalCluster``.

    python benchmarks/start_stop_cycles.py --cycles 100

Each setup runs in its own fresh process: three unmeasured cycles, then ``--cycles`` measured ones, each starting a
cluster of two CPU worker processes, computing a small dask sum on it and stopping it. Reported per cycle: resident
memory growth, the growth tracemalloc sees, and the schedulers still alive at the end (plain distributed keeps
every one in its module caches). Threads, open files and child processes are compared before and after.
"""

from __future__ import annotations

import argparse
import gc
import json
import subprocess
import sys
import tracemalloc
from typing import Any

import psutil


def ours() -> None:
    from IPython.core.interactiveshell import InteractiveShell
    from IPython.utils.capture import capture_output

    shell = InteractiveShell.instance()
    shell.run_line_magic("load_ext", "gpu_magics")

    def cycle() -> str:
        with capture_output() as said:
            shell.run_line_magic("gpucluster", "--cpu-workers 2")
            shell.run_cell("import dask.array as da\nfloat(da.ones(100, chunks=10).sum().compute())")
            shell.run_line_magic("gpucluster", "stop")
        return said.stderr

    measure(cycle)


def plain() -> None:
    import dask.array as da
    from distributed import Client, LocalCluster

    def cycle() -> str:
        local = LocalCluster(n_workers=2, processes=True, threads_per_worker=1)
        client = Client(local)
        float(da.ones(100, chunks=10).sum().compute())
        client.close()
        local.close()
        return ""

    measure(cycle)


def measure(cycle: Any) -> None:
    from distributed import Scheduler

    cycles = int(sys.argv[3])
    for _ in range(3):
        cycle()
    process = psutil.Process()
    gc.collect()
    tracemalloc.start(1)
    before = tracemalloc.take_snapshot()
    rss, threads, files, children = (
        process.memory_info().rss,
        process.num_threads(),
        len(process.open_files()),
        len(process.children(recursive=True)),
    )
    printed = sum(bool(cycle().strip()) for _ in range(cycles))
    gc.collect()
    after = tracemalloc.take_snapshot()
    traced = sum(stat.size_diff for stat in after.compare_to(before, "filename"))
    found = {
        "rss_kb_per_cycle": round((process.memory_info().rss - rss) / cycles / 1e3, 1),
        "traced_kb_per_cycle": round(traced / cycles / 1e3, 1),
        "schedulers_alive": sum(isinstance(item, Scheduler) for item in gc.get_objects()),
        "threads": [threads, process.num_threads()],
        "open_files": [files, len(process.open_files())],
        "children": [children, len(process.children(recursive=True))],
        "cycles_that_printed_to_stderr": printed,
    }
    print(json.dumps(found), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cycles", type=int, default=100)
    args = parser.parse_args()
    rows = {}
    for setup in ("ours", "plain"):
        finished = subprocess.run(
            [sys.executable, __file__, "--child", setup, str(args.cycles)], capture_output=True, text=True
        )
        lines = [line for line in finished.stdout.splitlines() if line.startswith("{")]
        if finished.returncode != 0 or not lines:
            raise RuntimeError(f"{setup} failed:\n{finished.stderr[-3000:]}")
        rows[setup] = json.loads(lines[-1])
    print(f"{args.cycles} start / cell / stop cycles, 2 CPU workers each")
    for setup, found in rows.items():
        name = "%gpucluster" if setup == "ours" else "plain LocalCluster"
        print(f"  {name:<20} {json.dumps(found)}")


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--child":
        ours() if sys.argv[2] == "ours" else plain()
    else:
        main()
