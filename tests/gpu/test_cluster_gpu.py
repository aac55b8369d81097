"""``%gpucluster`` on real GPUs: one worker per GPU, each on its own device, warmed up, the seed workload on
CuPy chunks through the client."""

from __future__ import annotations

import os
import sys
import time

import psutil
import pytest
from IPython.core.error import UsageError
from IPython.utils.capture import capture_output

from gpu_magics import gpus
from gpu_magics.cluster.control import queries
from gpu_magics.cluster.options import GPU_WORKER_THREADS
from gpu_magics.magics.gpucluster import ClusterMagics


@pytest.fixture(scope="module")
def gpu_count() -> int:
    import cupy

    return int(cupy.cuda.runtime.getDeviceCount())


def gpucluster(magics: ClusterMagics, line: str) -> str:
    with capture_output() as captured:
        magics.gpucluster(line)
    return captured.stdout + "\n".join(o.data.get("text/plain", "") for o in captured.outputs)


def test_one_warm_worker_per_gpu(magics: ClusterMagics, gpu_count: int) -> None:
    began = time.perf_counter()
    text = gpucluster(magics, "--replace")
    elapsed = time.perf_counter() - began
    client = queries.require_client()
    workers = client.scheduler_info(n_workers=-1)["workers"]
    assert len(workers) == gpu_count
    assert all(w["nthreads"] == GPU_WORKER_THREADS for w in workers.values())
    devices = client.run(lambda: os.environ["CUDA_VISIBLE_DEVICES"].split(",")[0])
    assert sorted(devices.values()) == sorted(device.cuda_id for device in gpus.inventory().devices())
    # warmed: CuPy is loaded and its device busy with nothing
    assert all(client.run(lambda: "cupy" in sys.modules).values())
    current = queries.active()
    assert current is not None and current.warm_s is not None
    assert queries.has_gpu_workers()
    names = {info["gpu_name"] for info in current.devices.values()}
    assert len(names) == 1
    (name,) = names
    workers_text = f"{gpu_count} worker{'s' if gpu_count != 1 else ''}"
    assert queries.describe_hardware() == f"{gpu_count}x {name} ({workers_text})"
    assert text.count(name) >= gpu_count and " running " in text
    assert set(queries.gpu_worker_devices(client).values()) == {name}
    print(f"\nstart+warm {elapsed:.2f} s (ready {current.ready_s:.2f} s, warm {current.warm_s:.2f} s)")


def test_seed_workload_on_cupy_chunks(magics: ClusterMagics) -> None:
    import cupy
    import dask
    import dask.array as da

    client = queries.require_client()
    with dask.config.set({"array.backend": "cupy"}):
        x = da.random.normal(10, 1, size=(8000, 8000), chunks=2000)
        assert isinstance(x._meta, cupy.ndarray)
        began = time.perf_counter()
        value = float(client.compute((x + 1)[::2, ::2].mean()).result())
        first = time.perf_counter() - began
        began = time.perf_counter()
        float(client.compute((x + 1)[::2, ::2].mean()).result())
        warm = time.perf_counter() - began
    assert value == pytest.approx(11.0, abs=0.01)
    print(f"\nseed 8000^2 first {first:.3f} s, warm {warm:.3f} s")


def test_rechunk_across_the_other_axis_on_the_gpu_cluster(magics: ClusterMagics) -> None:
    """Rechunking CuPy chunks across the cluster works by default (tasks; distributed's P2P rechunk cannot
    move CuPy chunks), and what P2P does here is printed for the record."""
    import dask
    import dask.array as da

    client = queries.require_client()
    assert dask.config.get("array.rechunk.method") == "tasks"
    with dask.config.set({"array.backend": "cupy"}):
        x = da.random.random((16_000, 16_000), chunks=(16_000, 500)).persist()
        expected = float(client.compute(x.sum()).result())
        began = time.perf_counter()
        total = float(client.compute(x.rechunk((500, 16_000)).sum()).result())
        took = time.perf_counter() - began
        assert total == pytest.approx(expected, rel=1e-9)
        try:
            with dask.config.set({"array.rechunk.method": "p2p"}):
                client.compute(x.rechunk((500, 16_000)).sum()).result(timeout=120)
            p2p = "worked"
        except Exception as error:
            p2p = f"failed: {type(error).__name__}: {str(error).splitlines()[0][:160]}"
    print(f"\nrechunk 16000^2 by tasks {took:.3f} s; the same by p2p {p2p}")


def test_chosen_gpus_and_limits(magics: ClusterMagics, gpu_count: int) -> None:
    visible = [device.cuda_id for device in gpus.inventory().devices()]
    with pytest.raises(UsageError, match=f"no GPU {gpu_count} here"):
        magics.gpucluster(f"--gpus {gpu_count} --replace")
    gpucluster(magics, "--gpus 0 --replace --threads-per-worker 2")
    client = queries.require_client()
    assert list(client.run(lambda: os.environ["CUDA_VISIBLE_DEVICES"].split(",")[0]).values()) == [visible[0]]
    with pytest.raises(UsageError, match="one worker each"):
        magics.gpucluster("scale 2")


def test_stop_ends_the_worker_processes(magics: ClusterMagics) -> None:
    pids = list(queries.require_client().run(os.getpid).values())
    assert "stopped" in gpucluster(magics, "stop")
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and any(psutil.pid_exists(pid) for pid in pids):
        time.sleep(0.1)
    assert not any(psutil.pid_exists(pid) for pid in pids)
    assert queries.active() is None
