"""``%gpucluster`` against plain ``LocalCUDACluster`` defaults: start, warm-up and the seed workload, per GPU count.

    python benchmarks/cluster_start.py                        # every visible GPU, 100000^2 float64 in 10000^2 chunks
    python benchmarks/cluster_start.py --gpus 1,2,4           # one row pair per GPU count (the first N GPUs)
    python benchmarks/cluster_start.py --n 4000 --chunk 1000 --cpu-workers 2     # tiny, without a GPU

Each setup runs in its own fresh process; a tiny unmeasured run first fills CuPy's on-disk kernel cache, so neither
setup pays for compiling kernels the other already compiled. The gpu-magics setups are measured as a notebook meets
them, in a real IPython shell: ``%load_ext gpu_magics`` ran in an earlier cell (``--pause`` seconds before), then
``%gpucluster``; in the "used kernel" setup a small ``%%gpurun gpu`` cell ran before, so dask and CuPy are loaded. The
plain
setup imports dask-cuda, makes ``LocalCUDACluster(CUDA_VISIBLE_DEVICES=...)`` and a ``Client`` and waits for the
workers. Per setup: seconds until ready (gpu-magics: ready and warmed up), the first seed workload, and the
median of ``--repeat`` warm runs; the gpu-magics setups run it after ``%gpurun multi-gpu``, as plain cells in a session
do. Targets on 4x H200: start <= 2.5 s, first <= 1.3x warm, warm <= 0.20 s.
``seed_workload.py --multi-gpu`` prints these rows as a scaling table.
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

TARGETS = {"start_s": 2.5, "first_over_warm": 1.3, "warm_s": 0.20}
USED_KERNEL = "gpu-magics, used kernel"  # the setup where a %%gpurun cell ran before %gpucluster
RUN_ALL = "gpu-magics, Run All"  # %gpucluster, then at once the seed cell (fresh kernel)


def seed(n: int, chunk: int, backend: str) -> float:
    """The seed workload on the default (distributed) client: ``(normal(10, 1) + 1)[::2, ::2].mean()``."""
    import dask
    import dask.array as da

    with dask.config.set({"array.backend": backend}):
        x = da.random.normal(10, 1, size=(n, n), chunks=chunk)
        return float((x + 1)[::2, ::2].mean().compute())


SMALL_SEED_CELL = """import dask.array as da
x = da.random.normal(10, 1, size=(2000, 2000), chunks=1000)
(x + 1)[::2, ::2].mean().compute()"""


def start_ours(args: argparse.Namespace, used_kernel: bool) -> tuple[str, dict[str, Any], float]:
    """``%load_ext gpu_magics`` in a real IPython shell, ``args.pause`` seconds later ``%gpucluster``; with
    ``used_kernel``, a small ``%%gpurun`` seed cell ran first (dask and CuPy loaded, as in a notebook at work).
    Returns the hardware, the start breakdown and the seconds ``%gpucluster`` took."""
    from IPython.core.interactiveshell import InteractiveShell

    from gpu_magics.cluster.control import queries

    shell = InteractiveShell.instance()
    shell.run_line_magic("load_ext", "gpu_magics")  # also launches the server that workers fork from
    shell.run_line_magic("config", f"ClusterMagics.wait_for_workers = {args.wait_for_workers}")  # a notebook's
    shell.events.trigger("post_run_cell", None)  # the %load_ext cell ends (its imports ahead begin)
    if used_kernel:
        shell.run_cell_magic("gpurun", "cpu-threads -q" if args.cpu_workers else "gpu -q", SMALL_SEED_CELL)
    time.sleep(args.pause)
    if args.cpu_workers:
        line = f"--cpu-workers {args.cpu_workers}"
    else:
        line = f"--gpus {','.join(str(i) for i in range(args.gpu_count))}" if args.gpu_count else ""
    shell.events.trigger("pre_run_cell", None)  # the next cell begins (the magic waits for the imports begun ahead)
    began = time.perf_counter()
    began_epoch = time.time()
    shell.run_line_magic("gpucluster", f"{line} {args.options}")
    took = time.perf_counter() - began
    if args.run_all:  # the seed cell comes at once (it waits for the cluster itself)
        return queries.describe_hardware(), {"began": began}, took
    queries.require_client()  # ready: every worker up and warm
    ready = time.perf_counter() - began
    current = queries.active()
    assert current is not None and current.ready_s is not None and current.warm_s is not None
    forks = [info.get("process_started_at", 0.0) - began_epoch for info in current.devices.values()]
    setups = [info.get("setup_at", 0.0) - began_epoch for info in current.devices.values()]
    warmed = [info.get("warmed_at", 0.0) - began_epoch for info in current.devices.values()]
    breakdown = {
        "all_warm_s": round(ready, 3),
        "ready_s": round(current.ready_s, 3),
        "warm_s": round(current.warm_s, 3),
        "workers_forked_s": round(max(forks), 3) if forks else None,
        "workers_set_up_s": round(max(setups), 3) if setups else None,
        "workers_warmed_s": round(max(warmed), 3) if warmed else None,
        "workers_s": [  # each worker: forked, set up (its CUDA context made), warmed (kernels loaded)
            [round(f, 3), round(s, 3), round(w, 3)] for f, s, w in sorted(zip(forks, setups, warmed, strict=True))
        ],
    }
    return queries.describe_hardware(), breakdown, took


def start_plain(args: argparse.Namespace) -> tuple[str, dict[str, Any], float]:
    began = time.perf_counter()
    from distributed import Client, LocalCluster

    if args.cpu_workers:
        local: Any = LocalCluster(n_workers=args.cpu_workers, processes=True)
    else:
        from dask_cuda import LocalCUDACluster

        devices = {"CUDA_VISIBLE_DEVICES": list(range(args.gpu_count))} if args.gpu_count else {}
        local = LocalCUDACluster(**devices)
    client = Client(local)
    client.wait_for_workers(len(local.workers))
    return f"{len(local.workers)} workers (plain defaults)", {}, time.perf_counter() - began


def measure(setup: str, args: argparse.Namespace) -> dict[str, Any]:
    """Start the cluster the way ``setup`` says, then time the seed workload, first and warm."""
    if setup == "plain":
        hardware, breakdown, start_s = start_plain(args)
    else:
        hardware, breakdown, start_s = start_ours(args, used_kernel=setup == USED_KERNEL)
        from IPython.core.interactiveshell import InteractiveShell

        # the seed then runs as a plain cell does after %gpurun multi-gpu: the product's tuned path
        InteractiveShell.instance().run_line_magic("gpurun", "multi-gpu")
    backend = "numpy" if args.cpu_workers else "cupy"
    full_collections = gc.get_stats()[2]["collections"]  # full collections pause this process (and its scheduler)
    began = time.perf_counter()
    value = seed(args.n, args.chunk, backend)
    first_s = time.perf_counter() - began
    if "began" in breakdown:  # Run All: %gpucluster, then the seed cell at once
        breakdown["run_all_s"] = round(time.perf_counter() - breakdown.pop("began"), 3)
    elif setup == "plain":
        breakdown["run_all_s"] = round(start_s + first_s, 3)
    first_full_collections = gc.get_stats()[2]["collections"] - full_collections
    warm = []
    for _ in range(args.repeat):
        began = time.perf_counter()
        seed(args.n, args.chunk, backend)
        warm.append(time.perf_counter() - began)
    warm_s = statistics.median(warm)
    breakdown["full_gc_first"] = first_full_collections
    breakdown["full_gc_all"] = gc.get_stats()[2]["collections"] - full_collections
    return {
        "setup": setup,
        "gpus": args.gpu_count,
        "hardware": hardware,
        "start_s": round(start_s, 3),
        "breakdown": breakdown,
        "first_s": round(first_s, 3),
        "warm_s": round(warm_s, 3),
        "warm_all_s": [round(t, 3) for t in warm],
        "first_over_warm": round(first_s / warm_s, 2),
        "value": value,
    }


def run_child(setup: str, args: argparse.Namespace, gpu_count: int = 0) -> dict[str, Any]:
    """``measure(setup)`` in a fresh process on the first ``gpu_count`` GPUs (0: every visible one)."""
    command = [
        sys.executable,
        __file__,
        "--child",
        setup,
        "--n",
        str(args.n),
        "--chunk",
        str(args.chunk),
        "--repeat",
        str(args.repeat),
        "--pause",
        str(args.pause),
        f"--options={args.options}",
        "--gpu-count",
        str(gpu_count),
    ]
    if args.cpu_workers:
        command += ["--cpu-workers", str(args.cpu_workers)]
    command += ["--wait-for-workers", args.wait_for_workers] + (["--run-all"] if setup == RUN_ALL else [])
    finished = subprocess.run(command, capture_output=True, text=True, timeout=args.child_timeout)
    lines = [line for line in finished.stdout.splitlines() if line.startswith("{")]
    if finished.returncode != 0 or not lines:
        raise RuntimeError(f"{setup} failed ({finished.returncode}):\n{finished.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(lines[-1])
    return result


def fill_kernel_cache(args: argparse.Namespace) -> None:
    """A tiny plain run, not reported: compiles the kernels both setups use into CuPy's on-disk cache."""
    chunk = args.chunk // 10 or 100
    tiny = argparse.Namespace(**{**vars(args), "n": 2 * chunk, "chunk": chunk, "repeat": 1})
    run_child("plain", tiny, gpu_count=1 if not args.cpu_workers else 0)


def compare(args: argparse.Namespace, gpu_counts: list[int]) -> list[dict[str, Any]]:
    """Plain and gpu-magics rows for each GPU count (0: every visible GPU), plain first; ``--rounds`` of each,
    interleaved."""
    fill_kernel_cache(args)
    rows = []
    for count in gpu_counts:
        for _ in range(args.rounds):
            if not args.only_ours:
                rows.append(run_child("plain", args, count))
            rows.append(run_child("gpu-magics", args, count))
            rows.append(run_child(USED_KERNEL, args, count))
            rows.append(run_child(RUN_ALL, args, count))
    return rows


def medians(rows: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Per setup and GPU count: the median of each figure over the rounds."""
    found: dict[str, dict[str, list[float]]] = {}
    for row in rows:
        figures = {"start_s": row["start_s"], "first_s": row["first_s"], **row["breakdown"]}
        into = found.setdefault(f"{row['setup']} ({row['gpus'] or 'all'} GPU)", {})
        for key, value in figures.items():
            if isinstance(value, (int, float)):
                into.setdefault(key, []).append(float(value))
    return {setup: {k: round(statistics.median(v), 3) for k, v in figs.items()} for setup, figs in found.items()}


def print_rows(rows: list[dict[str, Any]]) -> None:
    print(f"{'setup':<24} {'start s':>8} {'first s':>8} {'warm s':>8} {'first/warm':>10}  hardware; start breakdown")
    for row in rows:
        parts = ", ".join(f"{key} {value}" for key, value in row["breakdown"].items() if value is not None)
        print(
            f"{row['setup']:<24} {row['start_s']:>8.2f} {row['first_s']:>8.2f} {row['warm_s']:>8.3f} "
            f"{row['first_over_warm']:>10.2f}  {row['hardware']}{'; ' + parts if parts else ''}"
        )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--repeat", type=int, default=5, help="warm runs (median reported)")
    parser.add_argument("--cpu-workers", type=int, default=0, help="CPU workers instead of GPUs (no GPU needed)")
    parser.add_argument("--options", default="", help="extra %%gpucluster options for the gpu-magics setup")
    parser.add_argument("--only-ours", action="store_true", help="skip the plain LocalCUDACluster setup")
    parser.add_argument("--pause", type=float, default=3.0, help="seconds between %%load_ext and %%gpucluster")
    parser.add_argument("--child-timeout", type=float, default=300)
    parser.add_argument(
        "--wait-for-workers", default="False", choices=("True", "False"), help="%%gpucluster waits (True) or not"
    )
    parser.add_argument("--run-all", action="store_true", help="the seed cell right after %%gpucluster (Run All)")
    parser.add_argument("--rounds", type=int, default=1, help="fresh processes per setup (medians reported)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=100_000, help="array side (default 100000: 80 GB)")
    parser.add_argument("--chunk", type=int, default=10_000, help="chunk side (default 10000)")
    parser.add_argument("--gpus", default="0", help="GPU counts to run, comma-separated (default 0: every GPU)")
    parser.add_argument("--json", type=Path, help="also write the results here")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--gpu-count", type=int, default=0, help=argparse.SUPPRESS)
    add_arguments(parser)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(measure(args.child, args)), flush=True)
        return

    rows = compare(args, [int(count) for count in args.gpus.split(",")])
    print(f"seed workload {args.n}^2 float64 in {args.chunk}^2 chunks")
    print_rows(rows)
    print(f"medians of {args.rounds} rounds (this machine: {_this_machine()}):")
    for setup, figures in medians(rows).items():
        print(f"  {setup}: " + ", ".join(f"{key} {value}" for key, value in figures.items()))
    ours = next(row for row in reversed(rows) if row["setup"] == "gpu-magics")
    print(
        f"targets (set on 4x H200; this machine: {_this_machine()}):",
        ", ".join(f"{key} {ours[key]} {'<=' if ours[key] <= limit else '>'} {limit}" for key, limit in TARGETS.items()),
    )
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


def _this_machine() -> str:
    """The GPUs here in one phrase (``1x NVIDIA H100 80GB HBM3``), as the figures above ran on them."""
    from gpu_magics import gpus

    inventory = gpus.inventory()
    devices = inventory.devices()
    return gpus.describe(devices, inventory.simulated) if devices else "no GPU"


if __name__ == "__main__":
    main()
