"""Parking everything a notebook holds, through real kernels with simulated GPUs (the CUDA driver's stand-in): the
SPMD ranks (their process group ended and made again in the same processes, their variables kept) and the kernel's
own GPU memory (back before the next execution, said in its output; a failed resume fails the cell in one line and
the next one tries again)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpu_magics.cluster.managers.local.simulated import PARK_NOTE
from gpu_magics.cluster.workers.checkpoint import FAIL_ENV
from tests.test_kernel_faults import loaded_kernel
from tests.test_parking_settings import html_line, outputs

pytestmark = pytest.mark.slow

GIB = 2**30
SIMULATED = PARK_NOTE.strip()


def test_the_ranks_are_parked_with_the_workers_and_keep_their_variables_and_their_group(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    with loaded_kernel(tmp_path, "fake:2") as kernel:
        kernel.ok("%config ClusterMagics.wait_for_workers = True")  # both workers there: two ranks
        kernel.ok("%gpucluster --name sim", timeout=180)
        kernel.ok(
            "%%gpurun spmd -q --init torch\nimport os, torch\nw = torch.arange(4.0) * (1 + int(os.environ['RANK']))",
            timeout=240,
        )
        shown = outputs(kernel, "%gpucluster park")
        line = html_line(shown, "%gpucluster: parked 2 workers and 2 ranks of 'sim' ")
        assert "the next cell that sends it work resumes them" in line
        shown = outputs(
            kernel,
            "%%gpurun spmd\nimport torch.distributed as dist\nt = w.clone()\ndist.all_reduce(t)\nt.tolist()",
            timeout=240,
        )
        html_line(shown, f"%gpucluster: resumed 2 workers and 2 ranks of 'sim' {SIMULATED} in ")
        remade = "the process group is made again in the same processes, now (--init torch): variables are kept"
        assert any(kind == "stream" and remade in str(data) for kind, data in shown), shown
        results = [data for kind, data in shown if kind == "execute_result"]
        assert results and results[0]["text/plain"] == "[0.0, 3.0, 6.0, 9.0]", shown  # w of both ranks, kept


def test_the_kernels_own_gpu_memory_is_parked_and_comes_back_before_the_next_cell(tmp_path: Path) -> None:
    spec = tmp_path / "spec.json"
    spec.write_text(
        json.dumps(
            {
                "gpus": [
                    {"name": "NVIDIA H200", "uuid": f"GPU-7ec1b000-0000-0000-0000-00000000000{i}",
                     "memory_total": 150 * GIB, "memory_used": 0, "gpu_util": 0,
                     "processes": [{"pid": "self", "used_memory": 2 * GIB}] if i == 0 else []}
                    for i in range(2)
                ]
            }
        )
    )  # fmt: skip
    failing = tmp_path / "refuse"
    os.environ[FAIL_ENV] = f"@{failing}"  # the kernel started below reads it; the test writes the file
    try:
        with loaded_kernel(tmp_path, f"fake:{spec}") as kernel:
            kernel.ok("%config ClusterMagics.wait_for_workers = True")
            kernel.ok("%gpucluster --name sim", timeout=180)
            shown = outputs(kernel, "%gpucluster park")
            line = html_line(shown, "%gpucluster: parked 2 workers and this kernel of 'sim' ")
            assert line.endswith("; this kernel's comes back at the next cell"), line
            pid = int(kernel.ok("import os; print(os.getpid())").split()[-1])  # this cell brings the kernel back
            reply, text = kernel.run("%gpucluster park")  # (the workers were never resumed: parked already)
            assert reply["status"] == "error" and "'sim' is parked already" in text, text
            kernel.ok("import dask.array as da; int(da.arange(10, chunks=5).sum().compute())")  # the cluster back
            outputs(kernel, "%gpucluster park")
            failing.write_text(f"restore:{pid}")  # another process took the GPU: the kernel's resume fails
            reply, text = kernel.run("print('ran')")
            assert reply["status"] == "error" and "ran" not in text.split(), text  # the cell failed, in one line
            assert text.strip().startswith(
                "UsageError: %gpucluster: this kernel's GPU memory could not come back (the driver refused to restore "
            ), text
            assert "free GPU memory, then run the cell again" in text and "Traceback" not in text, text
            failing.unlink()  # the GPU is free again: the next cell brings it back, and runs
            shown = outputs(kernel, "1 + 1")
            html_line(shown, "%gpucluster: this kernel's 2.0 GiB of GPU memory came back in ")
            assert ("execute_result", {"text/plain": "2"}) in shown, shown
    finally:
        os.environ.pop(FAIL_ENV, None)


def test_the_helper_that_parks_the_kernel_says_in_one_line_why_it_cannot() -> None:
    """Without a CUDA driver (or without its checkpoint calls) the helper exits 1 with the reason, which the park's
    line names; it never leaves a traceback."""
    done = subprocess.run(
        [sys.executable, "-m", "gpu_magics.cluster.workers.checkpoint", "park", str(os.getpid())],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if done.returncode == 0:  # pragma: no cover - a host with a driver parks this very process
        pytest.skip("this host has a CUDA driver that parks processes")
    assert done.returncode == 1
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "Traceback" not in done.stderr
