"""Parking everything a notebook holds, on a real GPU, through a real kernel as a user runs it: a one-worker cluster
with persisted CuPy data, a torch NCCL rank with a model, its optimizer's state and a large tensor, and the kernel's
own CuPy arrays. While parked NVML lists none of their processes (read from this test's process: a parked process's
own NVML reads wait); the next cell brings the kernel back, a ``.compute()`` the worker and the rank, an SPMD cell
makes the group again; everything is intact. Prints ``NOTEBOOK PARK FIGURES``."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from tests.test_kernel_faults import loaded_kernel
from tests.test_parking_settings import outputs

GIB = 1 << 30
RANK_SETUP = """%%gpurun spmd -q --init torch
import torch
torch.manual_seed(0)
model = torch.nn.Sequential(*[torch.nn.Linear(8192, 8192) for _ in range(4)]).cuda()
opt = torch.optim.Adam(model.parameters())
model(torch.randn(16, 8192, device="cuda")).sum().backward()
opt.step()
big = torch.randn(2 * 2**30 // 4, device="cuda")
view = big[10:100]
def checksum():
    torch.cuda.synchronize()
    total = sum(float(p.detach().double().sum()) for p in model.parameters())
    total += sum(float(v.double().sum()) for s in opt.state.values() for v in s.values() if torch.is_tensor(v))
    return round(total + float(big.double().sum()) + float(view.double().sum()), 3)
checksum()"""


def nvml_bytes(pids: list[int]) -> dict[int, int]:
    """What NVML lists each of ``pids`` holding on any GPU (absent: not listed)."""
    import pynvml

    pynvml.nvmlInit()
    try:
        found: dict[int, int] = {}
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            for process in pynvml.nvmlDeviceGetComputeRunningProcesses(handle):
                if process.pid in pids:
                    found[process.pid] = found.get(process.pid, 0) + int(process.usedGpuMemory or 0)
        return found
    finally:
        pynvml.nvmlShutdown()


def value(shown: list[tuple[str, object]]) -> str:
    results = [data for kind, data in shown if kind == "execute_result"]
    assert results, shown
    return str(results[-1]["text/plain"])  # type: ignore[index]


def lines(shown: list[tuple[str, object]]) -> str:
    return " | ".join(str(data["text/plain"]) for kind, data in shown if kind == "display_data")  # type: ignore[index]


@pytest.mark.timeout(900)
def test_a_park_gives_back_what_the_workers_the_ranks_and_the_kernel_hold(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("torch")
    monkeypatch.setenv("GPU_MAGICS_PARKABLE_ARRAYS", "1")  # the kernel's arrays parked by its own copies
    per_gpu = float(os.environ.get("PARK_GIB", "4"))
    with loaded_kernel(tmp_path, "nvml") as kernel:
        kernel.ok("%config ClusterMagics.wait_for_workers = True")
        kernel.ok("%gpucluster --name nb", timeout=300)
        kernel.ok(
            "import cupy, dask.array as da\n"
            f"n = int({per_gpu} * 2**30 / 8)\n"
            "x = da.random.RandomState(0, RandomState=cupy.random.RandomState).random(n, chunks=n // 8).persist()\n"
            "before = float(x.sum().compute())\n"
            "k = cupy.arange(2**28, dtype=cupy.float64)\nk_sum = float(k.sum())",
            timeout=300,
        )
        rank_sum = value(outputs(kernel, RANK_SETUP, timeout=600))
        pids_text = kernel.ok(
            "import os, json, gpu_magics\nfrom gpu_magics.spmd.kernel.ranks import current\n"
            "print(json.dumps({'kernel': os.getpid(), 'workers': sorted(gpu_magics.client().run(os.getpid).values()),"
            " 'ranks': sorted(current().pids.values())}))"
        )
        pids = json.loads(pids_text.strip().splitlines()[-1])
        everyone = [pids["kernel"], *pids["workers"], *pids["ranks"]]
        held = nvml_bytes(everyone)
        if pids["kernel"] not in held:
            pytest.skip(f"NVML's pids are not this machine's (it lists {sorted(held)})")
        assert set(held) == set(everyone), (held, pids)

        dump = tmp_path / "kernel-threads.txt"  # where the park cell hangs: every thread of the kernel, as it waits
        kernel.ok(
            f"import faulthandler\n_dump = open({str(dump)!r}, 'w')\nfaulthandler.dump_traceback_later(60, file=_dump)"
        )
        began = time.perf_counter()
        try:
            park_shown = outputs(kernel, "%gpucluster park", timeout=120)
        except Exception:  # the kernel's threads say where they wait
            pytest.fail(f"the park cell did not end: {dump.read_text() if dump.exists() else 'no dump'}")
        park_wall = time.perf_counter() - began
        park_line = lines(park_shown)
        assert "parked 1 worker, 1 rank and this kernel of 'nb'" in park_line, park_shown
        while_parked = nvml_bytes(everyone)
        assert while_parked == {}, (while_parked, park_line)  # NVML lists no process of the notebook

        began = time.perf_counter()
        back_cell = "faulthandler.cancel_dump_traceback_later()\nfloat(k.sum()) == k_sum"
        kernel_back = outputs(kernel, back_cell, timeout=300)
        kernel_wall = time.perf_counter() - began
        assert value(kernel_back) == "True" and "this kernel's" in lines(kernel_back), kernel_back
        began = time.perf_counter()
        cluster_back = outputs(kernel, "float(x.sum().compute()) == before", timeout=300)
        cluster_wall = time.perf_counter() - began
        assert value(cluster_back) == "True", cluster_back
        assert "resumed 1 worker and 1 rank of 'nb'" in lines(cluster_back), cluster_back
        began = time.perf_counter()
        rank_back = outputs(
            kernel,
            "%%gpurun spmd -q\nimport torch.distributed as dist\nt = torch.ones(4, device='cuda')\n"
            "dist.all_reduce(t)\n(checksum(), float(t.sum()))",
            timeout=600,
        )
        rank_wall = time.perf_counter() - began
        assert value(rank_back) == f"({rank_sum}, 4.0)", rank_back  # model, optimizer and tensors intact; NCCL again
        assert set(nvml_bytes(everyone)) == set(everyone)
        figures_text = kernel.ok(
            "import json\nfrom gpu_magics.cluster.control import parking\n"
            "from gpu_magics.cluster.workers import kernel_arrays, kernel_park\n"
            "print(json.dumps({**parking.last_figures, 'kernel resume': kernel_park.last_resume,"
            " 'kernel arrays parkable': kernel_arrays.installed() or kernel_arrays.why_not}))"
        )
        figures = {
            "gib_per_worker": per_gpu,
            "held_gib": {str(pid): round(used / GIB, 2) for pid, used in held.items()},
            "park_cell_s": round(park_wall, 3),
            "park_line": park_line,
            "kernel_back_cell_s": round(kernel_wall, 3),
            "kernel_back_line": lines(kernel_back),
            "compute_after_resume_s": round(cluster_wall, 3),
            "resume_line": lines(cluster_back),
            "spmd_cell_after_resume_s": round(rank_wall, 3),
            "steps": json.loads(figures_text.strip().splitlines()[-1]),
        }
        print("NOTEBOOK PARK FIGURES " + json.dumps(figures))
        kernel.ok("%gpucluster stop", timeout=120)
