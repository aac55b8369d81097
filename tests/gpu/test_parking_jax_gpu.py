"""Parking a notebook whose SPMD rank runs JAX, on a real GPU, through a real kernel: a one-worker cluster with
persisted CuPy data and a JAX rank (``--init jax``) holding a 1 GiB array. The rank has no NCCL group of the
package's to end: the driver checkpoints it as it is. While parked NVML lists neither process; the next SPMD cell
resumes them, and the array is intact. Skipped where JAX is not installed or has no CUDA backend."""

from __future__ import annotations

import importlib.util
import json
import time
from pathlib import Path

import pytest

from tests.gpu.test_parking_notebook_gpu import lines, nvml_bytes, value
from tests.test_kernel_faults import loaded_kernel
from tests.test_parking_settings import outputs

JAX_RANK = """%%gpurun spmd -q --init jax
import jax, jax.numpy as jnp
y = jnp.arange(2**28, dtype=jnp.float32) % 7
y_sum = float(y.sum())
(y_sum, jax.devices()[0].platform)"""


@pytest.mark.timeout(600)
def test_a_park_takes_a_jax_rank_as_it_is_and_its_arrays_come_back(tmp_path: Path) -> None:
    if importlib.util.find_spec("jax") is None:
        pytest.skip("needs jax (jax[cuda12] or jax[cuda13]) in the workers' environment")
    with loaded_kernel(tmp_path, "nvml") as kernel:
        kernel.ok("%config ClusterMagics.wait_for_workers = True")
        kernel.ok("%gpucluster --name jx", timeout=300)
        kernel.ok(
            "import cupy, dask.array as da\n"
            "x = da.random.RandomState(0, RandomState=cupy.random.RandomState).random(2**27, chunks=2**24).persist()\n"
            "before = float(x.sum().compute())",
            timeout=300,
        )
        made = value(outputs(kernel, JAX_RANK, timeout=300))
        if not made.endswith("'gpu')"):
            pytest.skip(f"jax has no CUDA backend here ({made})")
        pids_text = kernel.ok(
            "import os, json, gpu_magics\nfrom gpu_magics.spmd.kernel.ranks import current\n"
            "print(json.dumps({'workers': sorted(gpu_magics.client().run(os.getpid).values()),"
            " 'ranks': sorted(current().pids.values())}))"
        )
        pids = json.loads(pids_text.strip().splitlines()[-1])
        members = [*pids["workers"], *pids["ranks"]]
        held = nvml_bytes(members)
        if not held:
            pytest.skip("NVML's pids are not this machine's")
        assert set(held) == set(members), (held, pids)

        began = time.perf_counter()
        park_line = lines(outputs(kernel, "%gpucluster park", timeout=180))
        park_s = time.perf_counter() - began
        assert "parked 1 worker, 1 rank" in park_line, park_line
        assert nvml_bytes(members) == {}, park_line  # NVML lists neither the worker nor the JAX rank

        began = time.perf_counter()
        back = outputs(kernel, "%%gpurun spmd -q\n(float(y.sum()) == y_sum, float((y * 2).sum()) == 2 * y_sum)", 300)
        back_s = time.perf_counter() - began
        assert value(back) == "(True, True)", back
        assert "resumed" in lines(back) and "1 rank" in lines(back), back
        assert value(outputs(kernel, "float(x.sum().compute()) == before", timeout=300)) == "True"
        assert set(nvml_bytes(members)) == set(members)
        print(
            "JAX PARK FIGURES "
            + json.dumps(
                {
                    "held": held,
                    "park_cell_s": round(park_s, 3),
                    "park_line": park_line,
                    "spmd_cell_after_resume_s": round(back_s, 3),
                    "resume_line": lines(back),
                }
            )
        )
        kernel.ok("%gpucluster stop", timeout=120)
