"""Where a ``multi-gpu`` cell's time goes, and what each lever against the overhead is worth, on every visible GPU.

In one process: the ``gpu`` backend (one GPU, dask's threads), then ``%gpucluster`` variants (each started
fresh), each running the cells below as ``%%gpurun multi-gpu`` (median of ``--repeat`` warm runs) with the
time split the magic reports, then client-side levers (dask config) one at a time on the default cluster,
then plain ``LocalCUDACluster`` (defaults) in this process, and dask-cuda's array benchmark operations at two
chunk sizes on the three setups. With ``--profile DIR``, py-spy records a worker and the kernel during runs.

    python benchmarks/multi_gpu_levers.py [--n 100000] [--chunk 10000] [--repeat 5] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

CELLS = {
    "seed": "x = da.random.normal(10, 1, size=({n}, {n}), chunks={chunk})\n(x + 1)[::2, ::2].mean().compute()\n",
    "seed-philox": (
        "import functools, cupy\n"
        "rs = da.random.RandomState(42, RandomState=functools.partial(cupy.random.RandomState, "
        "method=cupy.cuda.curand.CURAND_RNG_PSEUDO_PHILOX4_32_10))\n"
        "x = rs.normal(10, 1, size=({n}, {n}), chunks={chunk})\n(x + 1)[::2, ::2].mean().compute()\n"
    ),
    "ones": "x = da.ones(({n}, {n}), chunks={chunk}) * 2\n(x + 1)[::2, ::2].mean().compute()\n",
}

# dask-cuda's local_cupy benchmark operations (dask_cuda/benchmarks/local_cupy.py), sizes for about 0.1-1 s
OPERATIONS = {
    "transpose_sum": ("x = da.random.random(({n}, {n}), chunks={chunk})\n(x + x.T).sum().compute()\n", 40_000),
    "dot": ("x = da.random.random(({n}, {n}), chunks={chunk})\nx.dot(x.T).sum().compute()\n", 20_000),
    "svd": (
        "x = da.random.random(({n}, 1000), chunks=({chunk}, 1000))\nu, s, v = da.linalg.svd(x)\ns.compute()\n",
        2_000_000,
    ),
    "sum": ("x = da.random.random(({n}, {n}), chunks={chunk})\nx.sum().compute()\n", 40_000),
    "mean": ("x = da.random.random(({n}, {n}), chunks={chunk})\nx.mean().compute()\n", 40_000),
    "slice": ("x = da.random.random(({n}, {n}), chunks={chunk})\nx[::3].copy().sum().compute()\n", 40_000),
}


def shell() -> InteractiveShell:
    ip = InteractiveShell.instance()
    ip.run_line_magic("load_ext", "gpu_magics")
    ip.run_cell("import dask, dask.array as da", store_history=False)
    return ip


def run_magic(ip: InteractiveShell, backend: str, cell: str, repeat: int) -> Any:
    """Median of ``repeat`` warm runs (after one not counted); the result object of the best-of run."""
    with capture_output():
        ip.run_cell_magic("gpurun", f"{backend} -q --no-monitor", cell)
        ip.run_cell_magic("gpurun", f"{backend} -q --no-monitor --repeat {repeat} -o _lever", cell)
    return ip.user_ns["_lever"]


def row(label: str, result: Any, reference: float | None) -> dict[str, Any]:
    median = result.median
    line: dict[str, Any] = {"setup": label, "median_s": median, "best_s": result.best, "tasks": result.tasks}
    if reference:
        line["vs_gpu"] = reference / median
    if result.split is not None:
        line["split"] = result.split.to_json()
        line["split_line"] = result.split.line()
    line["advice"] = result.advice
    ratio = f"  {reference / median:5.2f}x vs gpu" if reference else ""
    print(f"{label:58s} {median:7.3f} s (best {result.best:.3f}){ratio}  tasks {result.tasks}", flush=True)
    if result.split is not None:
        print(f"    {result.split.line()}", flush=True)
    if result.advice:
        print(f"    advice: {result.advice}", flush=True)
    return line


def start_cluster(ip: InteractiveShell, options: str, settings: dict[str, Any]) -> float:
    import dask

    began = time.perf_counter()
    with dask.config.set(settings), capture_output():
        ip.run_line_magic("gpucluster", f"{options} --no-dashboard --replace")
    return time.perf_counter() - began


def stop_cluster(ip: InteractiveShell) -> None:
    with capture_output():
        ip.run_line_magic("gpucluster", "stop")


def profile(pids: dict[str, int], seconds: float, out: Path) -> threading.Thread:
    """py-spy records each pid for ``seconds`` (raw collapsed stacks) in a thread; returns the thread."""
    places = [Path(sys.executable).parent, *(Path(entry) / "bin" for entry in sys.path if entry)]  # pip --target
    spy = shutil.which("py-spy") or next((str(p / "py-spy") for p in places if (p / "py-spy").is_file()), None)
    if spy is None:
        print("py-spy: not installed here; no profile (carry its wheel to record one)", flush=True)
        thread = threading.Thread(target=lambda: None)
        thread.start()
        return thread

    def record() -> None:
        procs = [
            subprocess.Popen(
                [spy, "record", "--pid", str(pid), "--duration", str(int(seconds)), "--rate", "250",
                 "--format", "raw", "--threads", "--nonblocking", "--output", str(out / f"pyspy-{name}.txt")],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
            )
            for name, pid in pids.items()
        ]  # fmt: skip
        for proc in procs:
            _, err = proc.communicate()
            if proc.returncode:
                print(f"py-spy: {err.decode()[-300:]}", flush=True)

    thread = threading.Thread(target=record, daemon=True)
    thread.start()
    return thread


def plain_cluster_rows(cells: dict[str, tuple[str, float]], repeat: int) -> list[dict[str, Any]]:
    """Plain LocalCUDACluster with its defaults, in this process: each cell (label -> (code, the gpu backend's
    median)) run as plain code under ``array.backend = "cupy"`` with the client as dask's scheduler."""
    import cupy
    import dask
    from dask_cuda import LocalCUDACluster
    from distributed import Client

    rows = []
    with (
        LocalCUDACluster(dashboard_address=None) as cluster,
        Client(cluster) as client,
        dask.config.set({"array.backend": "cupy"}),
    ):
        for label, (code, reference) in cells.items():
            namespace: dict[str, Any] = {}
            exec("import dask, dask.array as da", namespace)
            compiled = compile(code, "<plain>", "exec")
            times = []
            for attempt in range(repeat + 1):
                began = time.perf_counter()
                exec(compiled, namespace)
                client.run(lambda: cupy.cuda.Device().synchronize())
                if attempt:
                    times.append(time.perf_counter() - began)
            median = statistics.median(times)
            name = f"plain LocalCUDACluster defaults, {label}"
            rows.append({"setup": name, "median_s": median, "vs_gpu": reference / median})
            print(f"{name:58s} {median:7.3f} s  {reference / median:5.2f}x vs gpu", flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--chunk", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--json")
    parser.add_argument("--profile", help="folder for py-spy's records of a worker and the kernel")
    parser.add_argument(
        "--variants",
        default="|--threads-per-worker 1|--threads-per-worker 8|--threads-per-worker 16"
        "|saturation=1.1|stealing=off|profile=off",
        help="%%gpucluster options (or name=value dask settings) per cluster variant, '|'-separated; '' = defaults",
    )  # fmt: skip
    parser.add_argument("--operations", action="store_true", help="also dask-cuda's array operations")
    parser.add_argument("--only-seed", action="store_true", help="the seed alone: gpu, the default cluster, plain")
    args = parser.parse_args()
    n, chunk, repeat = args.n, args.chunk, args.repeat
    cells = {
        name: text.format(n=n, chunk=chunk) for name, text in CELLS.items() if name == "seed" or not args.only_seed
    }
    if args.only_seed:
        args.variants = ""
    ip = shell()
    figures: dict[str, Any] = {
        "n": n,
        "chunk": chunk,
        "gpus": os.environ.get("CUDA_VISIBLE_DEVICES", "all"),
        "rows": [],
    }
    rows = figures["rows"]
    print(f"seed {n}^2 float64 in {chunk}^2 chunks; median of {repeat} warm runs", flush=True)
    gpu = {name: run_magic(ip, "gpu", cell, repeat) for name, cell in cells.items()}
    for name, result in gpu.items():
        rows.append(row(f"gpu backend, {name}", result, None))
    reference = gpu["seed"].median
    import dask
    from dask.array.optimization import optimize as dask_optimize

    with dask.config.set(array_optimize=dask_optimize):
        rows.append(row("gpu backend, seed, dask's own graph", run_magic(ip, "gpu", cells["seed"], repeat), reference))

    named_settings = {
        "saturation=1.1": {"distributed.scheduler.worker-saturation": 1.1000001},
        "stealing=off": {"distributed.scheduler.work-stealing": False},
        "profile=off": {"distributed.worker.profile.enabled": False},
    }
    for variant in args.variants.split("|"):
        settings = named_settings.get(variant.strip(), {})
        options = "" if variant.strip() in named_settings else variant.strip()
        start_s = start_cluster(ip, options, settings)
        label = f"cluster [{variant.strip() or 'defaults'}]"
        print(f"{label}: started in {start_s:.2f} s", flush=True)
        rows.append({"setup": f"{label} start", "start_s": start_s})
        rows.append(row(f"{label}, seed", run_magic(ip, "multi-gpu", cells["seed"], repeat), reference))
        if variant.strip() or args.only_seed:
            continue
        for name in ("seed-philox", "ones"):
            rows.append(row(f"{label}, {name}", run_magic(ip, "multi-gpu", cells[name], repeat), gpu[name].median))
        import dask
        from dask.array.optimization import optimize as dask_optimize

        for lever, settings in {
            "dask's own graph (aliases kept, split_every 4)": {"array_optimize": dask_optimize, "split_every": 4},
            "split_every=64": {"split_every": 64},
            "fuse off": {"optimization.fuse.active": False},
        }.items():
            with dask.config.set(settings):
                rows.append(
                    row(f"{label} + {lever}, seed", run_magic(ip, "multi-gpu", cells["seed"], repeat), reference)
                )
        if args.profile:
            from gpu_magics.cluster.control import queries

            client = queries.require_client()
            pids = {f"worker{i}": pid for i, pid in enumerate(client.run(os.getpid).values())}
            pids["kernel"] = os.getpid()
            out = Path(args.profile)
            out.mkdir(parents=True, exist_ok=True)
            thread = profile(pids, 6, out)
            time.sleep(1.0)
            with capture_output():
                for _ in range(8):
                    ip.run_cell_magic("gpurun", "multi-gpu -q --no-monitor", cells["seed"])
            thread.join()
    stop_cluster(ip)
    plain_operations: dict[str, tuple[str, float]] = {}
    if args.operations:
        start_cluster(ip, "", {})
        for operation, (text, size) in OPERATIONS.items():
            for op_chunk in (size // 8, size // 4) if operation != "svd" else (size // 16, size // 8):
                cell = text.format(n=size, chunk=op_chunk)
                one = run_magic(ip, "gpu", cell, 3)
                plain_operations[f"op {operation} n={size} chunk={op_chunk}"] = (cell, one.median)
                rows.append(row(f"op {operation} n={size} chunk={op_chunk}: gpu", one, None))
                rows.append(
                    row(
                        f"op {operation} n={size} chunk={op_chunk}: multi-gpu",
                        run_magic(ip, "multi-gpu", cell, 3),
                        one.median,
                    )
                )
        stop_cluster(ip)
    try:
        rows.extend(plain_cluster_rows({"seed": (cells["seed"], reference), **plain_operations}, repeat))
    except Exception as error:  # the plain row is a reference, not the point
        print(f"plain LocalCUDACluster failed: {type(error).__name__}: {error}")

    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2, default=str))


if __name__ == "__main__":
    main()
