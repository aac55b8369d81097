"""What the workers' GPU telemetry costs: CPU in the kernel, the scheduler and each worker, and the wall time it
adds to a ``%%gpurun multi-gpu`` cell.

A scheduler and ``--workers`` worker processes are started with Dask's CLI, each worker with ``--gpus`` simulated
GPUs (``GPU_MAGICS_SOURCE=fake:N``; its NVML reading code is the real one). This process is the kernel: a real
IPython shell with the extension attaches with ``%gpucluster --address``. For each rate (and with telemetry off,
the baseline) it measures the processes' CPU time over ``--seconds`` of idle streaming, then runs a small
distributed cell ``--cells`` times, interleaving telemetry on and off. Run from the repository root::

    python -m benchmarks.telemetry_cost [--workers 16] [--gpus 8] [--hz 1,4] [--seconds 20] [--cells 15] [--json F]

Targets: each worker under 1% of a core at 4 Hz; the kernel under 5% of a core for 128 GPUs at 1 Hz; a
multi-gpu cell at most 1% slower with telemetry on than off.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil
from IPython.testing.globalipapp import start_ipython
from IPython.utils.capture import capture_output

from tests.cli_cluster import cli_cluster

CELL = "t_futures = t_client.map(lambda i: i * 2, range(400))\nt_total = sum(t_client.gather(t_futures))\n"


def cpu_percent(processes: list[psutil.Process], seconds: float) -> list[float]:
    """Each process's CPU over ``seconds``, in percent of one core."""
    before = [sum(p.cpu_times()[:2]) for p in processes]
    time.sleep(seconds)
    after = [sum(p.cpu_times()[:2]) for p in processes]
    return [100 * (b - a) / seconds for a, b in zip(before, after, strict=True)]


def attach(shell: Any, address: str, interval: float) -> None:
    with capture_output():
        shell.run_line_magic("gpucluster", "stop")
        shell.run_line_magic("config", f"ClusterMagics.telemetry_interval = {interval}")
        shell.run_line_magic("gpucluster", f"--address {address} --client t_client")


def wait_reports(expected_gpus: int, timeout: float = 60) -> None:
    from gpu_magics.cluster.control import queries

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        telemetry = queries.telemetry()
        if telemetry is not None and len(telemetry.gpus()) >= expected_gpus:
            return
        time.sleep(0.2)
    raise SystemExit(f"the workers did not report {expected_gpus} GPUs within {timeout:g} s")


def cell_seconds(shell: Any) -> float:
    began = time.perf_counter()
    with capture_output():
        shell.run_cell_magic("gpurun", "multi-gpu -q --no-monitor", CELL)
    return time.perf_counter() - began


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=16)
    parser.add_argument("--gpus", type=int, default=8, help="simulated GPUs per worker")
    parser.add_argument("--hz", default="1,4", help="report rates to measure, comma-separated")
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--cells", type=int, default=15)
    parser.add_argument("--json", type=Path)
    parser.add_argument(
        "--loopback-hosts", action="store_true", help="each worker on its own 127.0.0.x, standing for its own host"
    )
    args = parser.parse_args()
    rates = [float(hz) for hz in args.hz.split(",")]
    total_gpus = args.workers * args.gpus
    env = {"GPU_MAGICS_SOURCE": f"fake:{args.gpus}"}
    workers = {
        f"w{i:02d}": (f"127.0.0.{2 + i}" if args.loopback_hosts else "127.0.0.1", env) for i in range(args.workers)
    }
    shell = start_ipython()
    shell.run_line_magic("load_ext", "gpu_magics")
    results: dict[str, Any] = {"workers": args.workers, "gpus": total_gpus, "rates": {}}
    with tempfile.TemporaryDirectory() as logs, cli_cluster(workers, Path(logs)) as cluster:
        scheduler = psutil.Process(cluster.scheduler.pid)
        worker_processes = [psutil.Process(p.pid) for p in cluster.workers.values()]
        kernel = psutil.Process()
        for rate in [0.0, *rates]:
            attach(shell, cluster.address, 0.0 if rate == 0 else 1.0 / rate)
            if rate:
                wait_reports(total_gpus)
            time.sleep(2)
            kernel_cpu, scheduler_cpu, *worker_cpu = cpu_percent([kernel, scheduler, *worker_processes], args.seconds)
            label = "off" if rate == 0 else f"{rate:g} Hz"
            results["rates"][label] = {
                "kernel_cpu_percent": kernel_cpu,
                "scheduler_cpu_percent": scheduler_cpu,
                "worker_cpu_percent_mean": statistics.fmean(worker_cpu),
                "worker_cpu_percent_max": max(worker_cpu),
            }
        # interleaved cells: telemetry at the first rate, then off, and again
        on, off = [], []
        for _ in range(args.cells):
            for rate, bucket in ((rates[0], on), (0.0, off)):
                attach(shell, cluster.address, 0.0 if rate == 0 else 1.0 / rate)
                if rate:
                    wait_reports(total_gpus)
                cell_seconds(shell)  # one warm-up after each attach
                bucket.append(min(cell_seconds(shell) for _ in range(3)))
        results["cell"] = {
            "on_median_s": statistics.median(on),
            "off_median_s": statistics.median(off),
            "ratio": statistics.median(on) / statistics.median(off),
            "rate_hz": rates[0],
        }
        with capture_output():
            shell.run_line_magic("gpucluster", "stop")
    print(f"telemetry from {total_gpus} simulated GPUs ({args.workers} workers x {args.gpus})")
    print(f"{'rate':>8} {'kernel %':>9} {'scheduler %':>12} {'worker % mean':>14} {'worker % max':>13}")
    for label, row in results["rates"].items():
        print(
            f"{label:>8} {row['kernel_cpu_percent']:9.2f} {row['scheduler_cpu_percent']:12.2f} "
            f"{row['worker_cpu_percent_mean']:14.2f} {row['worker_cpu_percent_max']:13.2f}"
        )
    cell = results["cell"]
    print(
        f"multi-gpu cell, median of {args.cells} interleaved (best of 3 each): telemetry at {cell['rate_hz']:g} Hz "
        f"{cell['on_median_s'] * 1e3:.1f} ms, off {cell['off_median_s'] * 1e3:.1f} ms, ratio {cell['ratio']:.3f}"
    )
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
