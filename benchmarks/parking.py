"""What a park and its resume cost, through a real kernel as a notebook meets them: first the workers alone (with the
kernel's CUDA context), parked twice; then a notebook that also holds an SPMD rank's model and the kernel's own CuPy
arrays. For each park: the seconds and GiB/s of the park and of the resume, each step's seconds, what NVML lists while
parked, the host memory the processes took while parked, and the same cell before the park and after the resume.

    python benchmarks/parking.py --gib 8                 # one GPU (driver 570 or later), 8 GiB on the worker
    python benchmarks/parking.py --gib 40 --json out.json
    python benchmarks/parking.py --simulated --gib 0.05  # no GPU: simulated GPUs, the driver's stand-in, gloo

Prints one line per park and a Markdown table; ``--json`` writes the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.test_kernel_faults import Kernel

GIB = 1 << 30
DATA = """import dask.array as da, numpy
{array_module}
n = int({gib} * 2**30 / 8)
x = da.random.RandomState(0, RandomState={random_state}).random(n, chunks=n // 8).persist()
before = float(x.sum().compute())"""
SAME_CELL = "float(x.sum().compute()) == before"
RANK = """%%gpurun spmd -q --init torch
import torch
device = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)
model = torch.nn.Sequential(*[torch.nn.Linear({width}, {width}) for _ in range(4)]).to(device)
opt = torch.optim.Adam(model.parameters())
model(torch.randn(16, {width}, device=device)).sum().backward()
opt.step()
float(sum(float(p.detach().double().sum()) for p in model.parameters()))"""
KERNEL_ARRAYS = "import cupy\nk = cupy.arange(int({gib} * 2**30 / 8), dtype=cupy.float64)\nk_sum = float(k.sum())"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gib", type=float, default=8.0, help="GiB of persisted data on the worker")
    parser.add_argument("--kernel-gib", type=float, default=2.0, help="GiB of CuPy arrays in the kernel (GPU only)")
    parser.add_argument("--simulated", action="store_true", help="simulated GPUs: the driver's stand-in")
    parser.add_argument(
        "--parkable-arrays", action="store_true", help="the kernel's CuPy arrays parked by its own copies"
    )
    parser.add_argument("--json", type=Path, help="write the figures here")
    args = parser.parse_args()
    if args.parkable_arrays:
        os.environ["GPU_MAGICS_PARKABLE_ARRAYS"] = "1"  # (the kernel inherits it)
    with tempfile.TemporaryDirectory() as runtime:
        kernel = Kernel(Path(runtime), "fake:1" if args.simulated else "nvml")
        try:
            figures = measure(kernel, args)
        finally:
            kernel.close()
    print(table(figures))
    if args.json:
        args.json.write_text(json.dumps(figures, indent=1))


def measure(kernel: Kernel, args: argparse.Namespace) -> dict[str, Any]:
    kernel.ok("%load_ext gpu_magics")
    kernel.ok("%config ClusterMagics.wait_for_workers = True")
    kernel.ok("%gpucluster --name bench", timeout=300)
    module, state = ("", "numpy.random.RandomState") if args.simulated else ("import cupy", "cupy.random.RandomState")
    kernel.ok(DATA.format(array_module=module, gib=args.gib, random_state=state), timeout=600)
    figures: dict[str, Any] = {"gib": args.gib, "simulated": args.simulated, "parks": []}
    for name in ("workers alone, first park", "workers alone, parked again"):
        figures["parks"].append(one_park(kernel, name))
    kernel.ok(RANK.format(width=1024 if args.simulated else 8192), timeout=600)
    if not args.simulated:
        kernel.ok(KERNEL_ARRAYS.format(gib=args.kernel_gib), timeout=300)
    figures["parks"].append(
        one_park(kernel, "workers and a rank" if args.simulated else "workers, a rank and the kernel")
    )
    kernel.ok("%gpucluster stop", timeout=120)
    return figures


def one_park(kernel: Kernel, name: str) -> dict[str, Any]:
    """Park, read what is held while parked, resume through the same cell; the figures of it all."""
    pids = json.loads(last_line(kernel.ok(PIDS)))
    before = timed(kernel, SAME_CELL)
    held = gpu_bytes(pids)
    rss = host_bytes(pids)
    began = time.perf_counter()
    park_line = kernel.ok("%gpucluster park", timeout=300).strip()
    park_s = time.perf_counter() - began
    parked_gpu = gpu_bytes(pids)
    parked_rss = host_bytes(pids)
    began = time.perf_counter()
    resumed = kernel.ok(f"print({SAME_CELL})", timeout=600)
    first_s = time.perf_counter() - began
    assert "True" in resumed, resumed
    again = timed(kernel, SAME_CELL)
    steps = json.loads(last_line(kernel.ok(STEPS)))
    given_back = sum(held.values())
    return {
        "name": name,
        "processes": len(pids),
        "gpu_gib_before": round(given_back / GIB, 2),
        "gpu_gib_while_parked": round(sum(parked_gpu.values()) / GIB, 2),
        "host_gib_taken_while_parked": round((sum(parked_rss.values()) - sum(rss.values())) / GIB, 3),
        "park_s": round(park_s, 3),
        "park_gib_per_s": round(given_back / GIB / park_s, 1),
        "park_line": park_line,
        "resume_lines": [line for line in resumed.splitlines() if "gpucluster" in line],
        "same_cell_before_s": round(before, 3),
        "first_cell_after_s": round(first_s, 3),
        "same_cell_after_s": round(again, 3),
        "steps": steps,
    }


PIDS = """import os, json, gpu_magics
from gpu_magics.spmd.kernel.ranks import current
ranks = list(current().pids.values()) if current() else []
print(json.dumps([os.getpid(), *gpu_magics.client().run(os.getpid).values(), *ranks]))"""
STEPS = """import json
from gpu_magics.cluster.control import parking
from gpu_magics.cluster.workers import kernel_park
print(json.dumps({**parking.last_figures, "kernel resume": kernel_park.last_resume}))"""


def last_line(text: str) -> str:
    return text.strip().splitlines()[-1]


def timed(kernel: Kernel, cell: str) -> float:
    began = time.perf_counter()
    kernel.ok(cell, timeout=600)
    return time.perf_counter() - began


def gpu_bytes(pids: list[int]) -> dict[int, int]:
    """What NVML lists each process holding (none where it cannot be read: simulated GPUs)."""
    from tests.gpu.test_parking_notebook_gpu import nvml_bytes

    try:
        return nvml_bytes(pids)
    except Exception:  # no NVML here (simulated GPUs): nothing listed
        return {}


def host_bytes(pids: list[int]) -> dict[int, int]:
    import psutil

    found = {}
    for pid in pids:
        try:
            found[pid] = psutil.Process(pid).memory_info().rss
        except psutil.NoSuchProcess:
            continue
    return found


def table(figures: dict[str, Any]) -> str:
    rows = [
        "| park | GPU memory back | park | the first cell after (resume) | the same cell before / after | host taken |",
        "|---|---|---|---|---|---|",
    ]
    for park in figures["parks"]:
        rows.append(
            f"| {park['name']} | {park['gpu_gib_before']} GiB (while parked {park['gpu_gib_while_parked']} GiB) | "
            f"{park['park_s']} s ({park['park_gib_per_s']} GiB/s) | {park['first_cell_after_s']} s | "
            f"{park['same_cell_before_s']} s / {park['same_cell_after_s']} s | "
            f"{park['host_gib_taken_while_parked']} GiB |"
        )
    lines = [f"{park['name']}: {park['park_line']} | {' | '.join(park['resume_lines'])}" for park in figures["parks"]]
    return "\n".join([*lines, "", *rows])


if __name__ == "__main__":
    main()
