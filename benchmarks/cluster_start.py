"""``%gpucluster`` against plain ``LocalCUDACluster()`` defaults: start, warm-up and the seed workload.

    python benchmarks/cluster_start.py                      # 100000^2 float64 in 10000^2 chunks, every GPU
    python benchmarks/cluster_start.py --n 4000 --chunk 1000 --cpu-workers 2     # tiny, without a GPU

Each setup runs in its own fresh process (a tiny unmeasured run first fills CuPy's on-disk kernel cache, so
neither setup pays for compiling kernels the other already compiled). Per setup: seconds until the cluster
is ready (``%gpucluster``: ready and warmed up), the first seed workload, and the median of ``--repeat`` warm
runs. Targets on 4x H200: ready+warm <= 2.5 s, first <= 1.3x warm, warm <= 0.20 s.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

TARGETS = {"start_s": 2.5, "first_over_warm": 1.3, "warm_s": 0.20}


def seed(n: int, chunk: int, backend: str) -> float:
    """The seed workload on the default (distributed) client: ``(normal(10, 1) + 1)[::2, ::2].mean()``."""
    import dask
    import dask.array as da

    with dask.config.set({"array.backend": backend}):
        x = da.random.normal(10, 1, size=(n, n), chunks=chunk)
        return float((x + 1)[::2, ::2].mean().compute())


def measure(setup: str, args: argparse.Namespace) -> dict[str, Any]:
    """Start the cluster the way ``setup`` says, then time the seed workload, first and warm."""
    began = time.perf_counter()
    if setup == "gpu-magics":
        from gpu_magics import cluster
        from gpu_magics.cluster_options import parse_cluster_line

        line = f"--cpu-workers {args.cpu_workers} {args.options}" if args.cpu_workers else args.options
        cluster.start(parse_cluster_line(line))
        hardware = cluster.describe_hardware()
        current = cluster.active()
        assert current is not None and current.ready_s is not None and current.warm_s is not None
        hardware += f"; ready {current.ready_s:.2f} s + warm-up {current.warm_s:.2f} s"
    else:
        from distributed import Client, LocalCluster

        if args.cpu_workers:
            local: Any = LocalCluster(n_workers=args.cpu_workers, processes=True)
        else:
            from dask_cuda import LocalCUDACluster

            local = LocalCUDACluster()
        client = Client(local)
        client.wait_for_workers(len(local.workers))
        hardware = f"{len(local.workers)} workers (plain defaults)"
    start_s = time.perf_counter() - began
    backend = "numpy" if args.cpu_workers else "cupy"
    began = time.perf_counter()
    value = seed(args.n, args.chunk, backend)
    first_s = time.perf_counter() - began
    warm = []
    for _ in range(args.repeat):
        began = time.perf_counter()
        seed(args.n, args.chunk, backend)
        warm.append(time.perf_counter() - began)
    warm_s = statistics.median(warm)
    return {
        "setup": setup,
        "hardware": hardware,
        "start_s": round(start_s, 3),
        "first_s": round(first_s, 3),
        "warm_s": round(warm_s, 3),
        "warm_all_s": [round(t, 3) for t in warm],
        "first_over_warm": round(first_s / warm_s, 2),
        "value": value,
    }


def run_child(setup: str, args: argparse.Namespace) -> dict[str, Any]:
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
        f"--options={args.options}",
    ]
    if args.cpu_workers:
        command += ["--cpu-workers", str(args.cpu_workers)]
    finished = subprocess.run(command, capture_output=True, text=True, timeout=args.child_timeout)
    lines = [line for line in finished.stdout.splitlines() if line.startswith("{")]
    if finished.returncode != 0 or not lines:
        raise RuntimeError(f"{setup} failed ({finished.returncode}):\n{finished.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(lines[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=100_000, help="array side (default 100000: 80 GB)")
    parser.add_argument("--chunk", type=int, default=10_000, help="chunk side (default 10000)")
    parser.add_argument("--repeat", type=int, default=5, help="warm runs (median reported)")
    parser.add_argument("--cpu-workers", type=int, default=0, help="CPU workers instead of GPUs (no GPU needed)")
    parser.add_argument("--options", default="", help="extra %%gpucluster options for the gpu-magics setup")
    parser.add_argument("--only-ours", action="store_true", help="skip the plain LocalCUDACluster setup")
    parser.add_argument("--json", type=Path, help="also write the results here")
    parser.add_argument("--child-timeout", type=float, default=550)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(measure(args.child, args)), flush=True)
        return

    tiny = argparse.Namespace(
        **{**vars(args), "n": 2 * args.chunk // 10 or 200, "chunk": args.chunk // 10 or 100, "repeat": 1}
    )
    run_child("plain", tiny)  # fills the kernel cache; not reported
    results = [] if args.only_ours else [run_child("plain", args)]
    results.append(run_child("gpu-magics", args))
    print(f"seed workload {args.n}^2 float64 in {args.chunk}^2 chunks")
    print(f"{'setup':<12} {'start s':>8} {'first s':>8} {'warm s':>8} {'first/warm':>10}  hardware")
    for row in results:
        print(
            f"{row['setup']:<12} {row['start_s']:>8.2f} {row['first_s']:>8.2f} {row['warm_s']:>8.3f} "
            f"{row['first_over_warm']:>10.2f}  {row['hardware']}"
        )
    ours = results[-1]
    print(
        "targets (4x H200):",
        ", ".join(f"{key} {ours[key]} {'<=' if ours[key] <= limit else '>'} {limit}" for key, limit in TARGETS.items()),
    )
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
