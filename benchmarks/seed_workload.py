"""The seed workload through ``%%gpurun`` and through plain dask, in one process, warm and first call.

    python benchmarks/seed_workload.py                 # the article's size: 100000^2 float64 in 10000^2 chunks (80 GB)
    python benchmarks/seed_workload.py --n 8000 --chunk 1000 --cpu-only   # small, on a machine without a GPU

    python benchmarks/seed_workload.py --multi-gpu 1,2,4 --only-multi-gpu     # the multi-GPU rows alone

Prints (1) the overhead of ``%%gpurun`` on an empty cell, (2) on a GPU: plain dask (threads scheduler,
``array.backend="cupy"``) against ``%%gpurun gpu`` warm, with their ratio, the first call of each in a fresh
process, a sweep of the threads feeding the GPU, and the hardware limit (cuRAND normal + a strided sum per chunk),
(3) with ``--multi-gpu``, per GPU count: ``%gpucluster`` + ``%%gpurun multi-gpu``'s client against plain
``LocalCUDACluster`` defaults (start, first run, warm run; each setup in a fresh process, see
``cluster_start.py``), and the scaling table: speed-up over one GPU and efficiency.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

SEED = """
x = da.random.normal(10, 1, size=({n}, {n}), chunks={chunk})
(x + 1)[::2, ::2].mean().compute()
"""


def shell() -> Any:
    from IPython.core.interactiveshell import InteractiveShell

    ip = InteractiveShell.instance()
    ip.run_line_magic("load_ext", "gpu_magics")
    ip.run_cell("import dask, dask.array as da", store_history=False)
    return ip


def timed(function: Callable[[], Any], repeat: int) -> list[float]:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        function()
        times.append(time.perf_counter() - start)
    return times


def plain_dask(n: int, chunk: int, threads: int | None = None) -> float:
    import cupy
    import dask
    import dask.array as da

    settings: dict[str, Any] = {"scheduler": "threads", "array.backend": "cupy"}
    if threads:
        settings["num_workers"] = threads
    with dask.config.set(settings):
        x = da.random.normal(10, 1, size=(n, n), chunks=chunk)
        value = (x + 1)[::2, ::2].mean().compute()
    cupy.cuda.Device().synchronize()
    return float(value)


def magic(ip: Any, n: int, chunk: int, line: str = "gpu") -> Any:
    ip.run_cell_magic("gpurun", f"{line} -q -o _bench", SEED.format(n=n, chunk=chunk))
    return ip.user_ns["_bench"]


def hardware_limit(n: int, chunk: int) -> dict[str, float]:
    """Seconds for the whole array, chunk after chunk on one GPU, for the floor and for each step of dask's path.

    Floor: cuRAND (Philox) normals written into one reused buffer, then a two-stage sum of the strided view
    (rows first, so the reduction has many outputs and fills the GPU). Dask's path per chunk: a new CuPy
    ``RandomState`` (XORWOW, seeded per chunk) drawing normals, ``+ 1`` into a new array, and one all-axes
    ``sum`` of the strided view.
    """
    import cupy
    from cupy.cuda import curand

    generator = curand.createGenerator(curand.CURAND_RNG_PSEUDO_PHILOX4_32_10)
    curand.setPseudoRandomGeneratorSeed(generator, 1)
    buffer = cupy.empty((chunk, chunk), dtype=cupy.float64)
    total = cupy.zeros((), dtype=cupy.float64)
    chunks = (n // chunk) ** 2
    seeds = iter(range(1, 10**9))

    def generate() -> None:
        curand.generateNormalDouble(generator, buffer.data.ptr, buffer.size, 10.0, 1.0)

    def two_stage_sum() -> None:
        total[...] += cupy.sum(buffer[::2, ::2], axis=1).sum()

    def dask_random_state() -> None:
        cupy.random.RandomState(next(seeds)).normal(10, 1, size=(chunk, chunk))

    def dask_plus_one() -> None:
        buffer + 1

    def dask_strided_sum() -> None:
        total[...] += buffer[::2, ::2].sum()

    steps = {
        "floor": (generate, two_stage_sum),
        "curand_philox_normal": (generate,),
        "two_stage_strided_sum": (two_stage_sum,),
        "dask_path_randomstate_normal": (dask_random_state,),
        "dask_path_plus_one": (dask_plus_one,),
        "dask_path_strided_sum": (dask_strided_sum,),
    }
    figures = {}
    for label, functions in steps.items():
        for function in functions:
            function()
        cupy.cuda.Device().synchronize()
        start = time.perf_counter()
        for _ in range(chunks):
            for function in functions:
                function()
        cupy.cuda.Device().synchronize()
        figures[label] = time.perf_counter() - start
    return figures


def first_call(kind: str, n: int, chunk: int) -> float:
    """The first run in a fresh process (CUDA context, kernel loading and all)."""
    code = (
        "import sys, time, json; sys.path.insert(0, '.');"
        "from benchmarks.seed_workload import shell, plain_dask, magic;"
        f"n, chunk = {n}, {chunk};"
        + (
            "start = time.perf_counter(); plain_dask(n, chunk); t = time.perf_counter() - start"
            if kind == "plain"
            else "ip = shell(); start = time.perf_counter(); magic(ip, n, chunk); t = time.perf_counter() - start"
        )
        + "; print(json.dumps(t))"
    )
    output = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return float(json.loads(output.stdout.strip().splitlines()[-1]))


def empty_cell_overhead(ip: Any, repeat: int = 300) -> tuple[float, float]:
    """Median seconds of ``%%gpurun cpu-threads -q`` on ``pass`` and of running ``pass`` through the shell."""
    with_magic = timed(lambda: ip.run_cell_magic("gpurun", "cpu-threads -q", "pass"), repeat)
    compiled = compile("pass", "<bench>", "exec")
    bare = timed(lambda: exec(compiled, ip.user_ns), repeat)
    return statistics.median(with_magic), statistics.median(bare)


def multi_gpu_rows(args: argparse.Namespace) -> dict[str, Any]:
    """Plain LocalCUDACluster and %gpucluster rows for each count in ``args.multi_gpu``, and the scaling table."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from benchmarks import cluster_start

    counts = [int(count) for count in args.multi_gpu.split(",") if count]
    settings = argparse.Namespace(
        n=args.n,
        chunk=args.chunk,
        repeat=args.repeat,
        cpu_workers=0,
        options="",
        only_ours=False,
        pause=3.0,
        child_timeout=300,
        wait_for_workers="True",  # the seed rows measure a ready cluster (cluster_start.py measures the start)
        rounds=1,
    )
    rows = cluster_start.compare(settings, counts)
    print(f"multi-GPU rows: seed workload {args.n}^2 float64 in {args.chunk}^2 chunks, each setup in a fresh process")
    cluster_start.print_rows(rows)
    by = {(row["setup"], row["gpus"]): row for row in rows}
    reference = by[("gpu-magics", counts[0])]
    print(f"{'GPUs':>4} {'plain s':>8} {'ours s':>8} {'ours/plain':>10} {'speed-up':>8} {'efficiency':>10}")
    table = []
    for count in counts:
        plain, ours = by[("plain", count)], by[("gpu-magics", count)]
        speedup = reference["warm_s"] / ours["warm_s"] * counts[0]
        line = {
            "gpus": count,
            "plain_warm_s": plain["warm_s"],
            "ours_warm_s": ours["warm_s"],
            "ours_over_plain": round(ours["warm_s"] / plain["warm_s"], 3),
            "speedup_over_one_gpu": round(speedup, 2),
            "efficiency": round(speedup / count, 2),
        }
        table.append(line)
        print(
            f"{count:>4} {line['plain_warm_s']:>8.3f} {line['ours_warm_s']:>8.3f} {line['ours_over_plain']:>10.3f} "
            f"{line['speedup_over_one_gpu']:>7.2f}x {line['efficiency']:>10.2f}"
        )
    return {"rows": rows, "scaling": table}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--chunk", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--threads", default="4,8,16", help="thread counts to sweep for the gpu backend")
    parser.add_argument("--cpu-only", action="store_true", help="only the empty-cell overhead")
    parser.add_argument("--json", help="also write the figures to this file")
    parser.add_argument("--multi-gpu", default="", help="GPU counts for the multi-GPU rows, like 1,2,4")
    parser.add_argument("--only-multi-gpu", action="store_true", help="only the multi-GPU rows")
    args = parser.parse_args()
    figures: dict[str, Any] = {"n": args.n, "chunk": args.chunk}
    if args.only_multi_gpu:
        figures["multi_gpu"] = multi_gpu_rows(args)
        if args.json:
            with open(args.json, "w") as handle:
                json.dump(figures, handle, indent=2)
        return

    ip = shell()
    magic_time, bare_time = empty_cell_overhead(ip)
    figures["empty_cell_overhead_ms"] = (magic_time - bare_time) * 1e3
    print(f"%%gpurun overhead on an empty cell: {figures['empty_cell_overhead_ms']:.3f} ms (target < 2 ms)")
    if args.cpu_only:
        if args.json:
            with open(args.json, "w") as handle:
                json.dump(figures, handle, indent=2)
        return

    gb = args.n * args.n * 8 / 1e9
    print(f"seed workload: {args.n}^2 float64 ({gb:.0f} GB) in {args.chunk}^2 chunks, {args.repeat} warm runs each")
    figures["first_plain_s"] = first_call("plain", args.n, args.chunk)
    figures["first_magic_s"] = first_call("magic", args.n, args.chunk)

    plain_dask(args.n, args.chunk)  # warm this process
    magic(ip, args.n, args.chunk)
    plain, via_magic, unmonitored = [], [], []
    for _ in range(args.repeat):  # interleaved, so drift hits all alike
        plain.extend(timed(lambda: plain_dask(args.n, args.chunk), 1))
        via_magic.append(magic(ip, args.n, args.chunk).wall_time)
        unmonitored.append(magic(ip, args.n, args.chunk, "gpu --no-monitor").wall_time)
    figures["warm_plain_s"] = statistics.median(plain)
    figures["warm_magic_s"] = statistics.median(via_magic)
    figures["warm_magic_no_monitor_s"] = statistics.median(unmonitored)
    figures["ratio_monitor_over_no_monitor"] = figures["warm_magic_s"] / figures["warm_magic_no_monitor_s"]
    figures["ratio_magic_over_plain"] = figures["warm_magic_s"] / figures["warm_plain_s"]

    sweep = {}
    for threads in [int(t) for t in args.threads.split(",") if t]:
        magic(ip, args.n, args.chunk, f"gpu --workers {threads}")
        sweep[threads] = statistics.median(
            magic(ip, args.n, args.chunk, f"gpu --workers {threads}").wall_time for _ in range(args.repeat)
        )
    figures["gpu_threads_sweep_s"] = sweep
    figures["plain_threads"] = os.cpu_count()
    limits = [hardware_limit(args.n, args.chunk) for _ in range(3)]
    figures["hardware_limit_parts_s"] = {key: min(run[key] for run in limits) for key in limits[0]}
    figures["hardware_limit_s"] = figures["hardware_limit_parts_s"]["floor"]

    limit = figures["hardware_limit_s"]
    print(f"{'run':48} {'seconds':>9} {'vs plain':>9} {'vs limit':>9}")
    rows = [
        ("plain dask, first call (fresh process)", figures["first_plain_s"]),
        ("%%gpurun gpu, first call (fresh process)", figures["first_magic_s"]),
        (f"plain dask warm ({os.cpu_count()} threads)", figures["warm_plain_s"]),
        ("%%gpurun gpu warm (default threads)", figures["warm_magic_s"]),
        ("%%gpurun gpu --no-monitor warm", figures["warm_magic_no_monitor_s"]),
        *[(f"%%gpurun gpu --workers {t} warm", s) for t, s in sweep.items()],
        ("hardware limit (cuRAND + two-stage strided sum)", limit),
        *[(f"  step: {label}", seconds) for label, seconds in figures["hardware_limit_parts_s"].items()],
    ]
    for label, seconds in rows:
        print(f"{label:48} {seconds:9.3f} {seconds / figures['warm_plain_s']:8.2f}x {seconds / limit:8.2f}x")
    print(f"%%gpurun gpu / plain dask, warm: {figures['ratio_magic_over_plain']:.3f} (target <= 1.03)")
    print(f"monitor on / --no-monitor, warm: {figures['ratio_monitor_over_no_monitor']:.3f}")
    if args.multi_gpu:
        figures["multi_gpu"] = multi_gpu_rows(args)
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(figures, handle, indent=2)


if __name__ == "__main__":
    main()
