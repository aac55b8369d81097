"""What a GPU worker's own start costs, phase by phase, when several start at once.

    python benchmarks/gpu_context_start.py --processes 1,4            # needs GPUs; every phase, both visibilities
    python benchmarks/gpu_context_start.py --holder                   # also with the driver kept started ahead

Each process stands for one dask-cuda worker: it imports what a worker imports (before the clock), then all start
together and time, one after the other, NVML's start (``nvmlInit``), dask-cuda's check for an existing CUDA context
(NVML's process lists), the CUDA context itself (``cuda.core``'s ``Device().set_current()``, what dask-cuda's
preload calls), CuPy's first kernel and the seed workload's first random chunk. ``rotated`` gives each process
every GPU, its own first (dask-cuda's ``CUDA_VISIBLE_DEVICES``); ``alone`` gives it only its own GPU. With
``--holder`` each setup runs again while another process keeps the driver started (``cuInit`` only, as
``gpu_magics.cluster.workers.driver_start`` does). Prints one line per setup: the slowest process's seconds per
phase. Measured on 4x H100: one process that sees 4 GPUs 1.15 s to its context, 0.27 s with the holder; four at
once 1.64-1.76 s, 0.79-0.90 s with it.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from typing import Any

PHASES = ("nvml_init", "context_check", "cuda_context", "first_kernel", "first_random")


def child(start_at: float) -> dict[str, float]:
    """One process: the imports, then (at ``start_at``) each phase, timed."""
    import cupy
    import pynvml
    from cuda.core import Device
    from distributed.diagnostics import nvml as dask_nvml

    while time.time() < start_at:
        time.sleep(0.001)
    took: dict[str, float] = {}
    mark = time.perf_counter()

    def done(phase: str) -> None:
        nonlocal mark
        now = time.perf_counter()
        took[phase] = round(now - mark, 4)
        mark = now

    pynvml.nvmlInit()
    done("nvml_init")
    dask_nvml.has_cuda_context()
    done("context_check")
    Device().set_current()
    done("cuda_context")
    cupy.zeros(1).sum()
    cupy.cuda.runtime.deviceSynchronize()
    done("first_kernel")
    cupy.random.RandomState(1).normal(10, 1, size=(256, 256)).mean()
    cupy.cuda.runtime.deviceSynchronize()
    done("first_random")
    took["total"] = round(sum(took[p] for p in PHASES), 4)
    return took


def hold(seconds: float) -> None:
    """A process that only starts the CUDA driver (no context, no device memory) and stays ``seconds``."""
    import ctypes

    began = time.perf_counter()
    ctypes.CDLL("libcuda.so.1").cuInit(0)
    print(json.dumps({"holder_cuinit_s": round(time.perf_counter() - began, 4)}), flush=True)
    time.sleep(seconds)


def visible(index: int, count: int, how: str) -> str:
    if how == "alone":
        return str(index)
    return ",".join(str((index + k) % count) for k in range(count))


def run(processes: int, gpus: int, how: str) -> dict[str, Any]:
    start_at = time.time() + 4.0  # after every process has imported
    children = [
        subprocess.Popen(
            [sys.executable, __file__, "--child", str(start_at)],
            env={**os.environ, "CUDA_VISIBLE_DEVICES": visible(i % gpus, gpus, how)},
            stdout=subprocess.PIPE,
            text=True,
        )
        for i in range(processes)
    ]
    found = [json.loads(c.communicate(timeout=120)[0].strip().splitlines()[-1]) for c in children]
    slowest = {key: max(f[key] for f in found) for key in (*PHASES, "total")}
    return {"processes": processes, "visibility": how, "slowest": slowest, "each_total": [f["total"] for f in found]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--processes", default="1,4", help="process counts, comma-separated")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--holder", action="store_true", help="also with a process that only started the driver")
    parser.add_argument("--child", type=float, help=argparse.SUPPRESS)
    parser.add_argument("--hold", type=float, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        print(json.dumps(child(args.child)))
        return
    if args.hold is not None:
        hold(args.hold)
        return
    import pynvml

    pynvml.nvmlInit()
    gpus = pynvml.nvmlDeviceGetCount()
    for holder in (False, True) if args.holder else (False,):
        held = None
        if holder:  # the driver started by another process first, which stays while the others start
            held = subprocess.Popen([sys.executable, __file__, "--hold", "600"], stdout=subprocess.PIPE, text=True)
            assert held.stdout is not None
            print(held.stdout.readline().strip(), flush=True)
        for count in (int(c) for c in args.processes.split(",") if c):
            for how in ("rotated", "alone"):
                for _ in range(args.rounds):
                    print(json.dumps({"holder": holder, **run(min(count, gpus), gpus, how)}), flush=True)
        if held is not None:
            held.kill()
            held.wait()


if __name__ == "__main__":
    main()
