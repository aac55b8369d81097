"""``%gpucluster park`` on real GPUs: a cluster of one worker per GPU holding about 4 GiB of persisted CuPy data each
gives its GPUs back (NVML lists none of its worker processes), and the next ``.compute()`` resumes the workers with
their data; then parks and resumes again (a repeated park). This process is the kernel: where it holds GPU memory it
is parked too, and comes back as IPython's ``pre_execute`` would bring it (``kernel_park.before_execute``). Prints
the figures (GiB a GPU, park and resume seconds, each step's, the same cell before the park and after the resume) as
a ``PARK FIGURES`` line."""

from __future__ import annotations

import json
import os
import time

import pytest
from IPython.utils.capture import capture_output

from gpu_magics.cluster.control import kernel_cluster, parking, queries
from gpu_magics.cluster.workers import kernel_park
from gpu_magics.cluster.workers.kernel_context import process_memory
from gpu_magics.magics.gpucluster import ClusterMagics
from tests.gpu.test_cluster_gpu import gpucluster

GIB = 1 << 30


def test_a_parked_cluster_gives_its_gpus_back_and_work_resumes_it_with_its_data(magics: ClusterMagics) -> None:
    import cupy
    import dask.array as da

    gpucluster(magics, "--replace --name parked")
    client = queries.require_client()
    workers = len(client.scheduler_info(n_workers=-1)["workers"])
    per_gpu = float(os.environ.get("PARK_GIB", "4"))
    n = int(per_gpu * GIB / 8) * workers
    state = da.random.RandomState(0, RandomState=cupy.random.RandomState)
    x = state.random(n, chunks=n // (workers * 8)).persist()
    before = float(x.sum().compute())
    began = time.perf_counter()
    assert float(x.sum().compute()) == pytest.approx(before, rel=1e-12)
    warm_before = time.perf_counter() - began
    current = kernel_cluster.in_use()
    assert current is not None
    pids = current.manager.park_targets()
    held = {pid: sum(v or 0 for v in process_memory(pid).values()) for pid in pids.values()}
    assert all(used > per_gpu * GIB * 0.9 for used in held.values()), held

    began = time.perf_counter()
    said = gpucluster(magics, "park")
    park_s = time.perf_counter() - began
    assert f"parked {workers} worker" in said, said
    assert kernel_cluster.phase() is kernel_cluster.Phase.PARKED
    assert all(not process_memory(pid) for pid in pids.values())  # NVML lists none of them: the GPUs are free

    began = time.perf_counter()
    with capture_output() as captured:
        kernel_park.before_execute()  # what IPython's pre_execute does in a kernel: this process's own GPU state back
        after = float(x.sum().compute())
    first_after = time.perf_counter() - began
    # the line is HTML with its text beside it (gpu_magics.text.said), shown where the resume happened
    resume_line = captured.stdout + "".join(output.data.get("text/plain", "") for output in captured.outputs)
    assert "resumed" in resume_line, resume_line
    assert after == pytest.approx(before, rel=1e-12)
    assert kernel_cluster.phase() is kernel_cluster.Phase.IN_USE
    assert all(sum(v or 0 for v in process_memory(pid).values()) > 0 for pid in pids.values())
    began = time.perf_counter()
    x.sum().compute()
    warm_after = time.perf_counter() - began
    first_steps = dict(parking.last_figures)
    began = time.perf_counter()
    again = gpucluster(magics, "park")  # a repeated park: its host memory is fresh again, as the first one's was
    park_again_s = time.perf_counter() - began
    assert f"parked {workers} worker" in again and all(not process_memory(pid) for pid in pids.values())
    began = time.perf_counter()
    with capture_output():
        kernel_park.before_execute()
        assert float(x.sum().compute()) == pytest.approx(before, rel=1e-12)
    resume_again_s = time.perf_counter() - began
    figures = {
        "workers": workers,
        "gib_per_gpu": per_gpu,
        "held_gib": round(sum(held.values()) / GIB, 2),
        "park_s": round(park_s, 3),
        "park_line": said.strip(),
        "resume_line": resume_line.strip(),
        "first_cell_after_resume_s": round(first_after, 3),
        "same_cell_before_park_s": round(warm_before, 3),
        "same_cell_after_resume_warm_s": round(warm_after, 3),
        "steps": first_steps,
        "park_again_s": round(park_again_s, 3),
        "first_cell_after_the_second_resume_s": round(resume_again_s, 3),
        "steps_again": parking.last_figures,
    }
    print("PARK FIGURES " + json.dumps(figures))
    gpucluster(magics, "stop")
