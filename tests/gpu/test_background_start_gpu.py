"""``%gpucluster`` returning at once on a real GPU: the kernel uses CuPy while its cluster starts in the background
(the start makes the kernel's CUDA context and imports CuPy meanwhile), and both get right answers."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output

from gpu_magics.cluster.control import queries
from gpu_magics.cluster.control.verbs import stop
from gpu_magics.cluster.records import record as cluster_records
from gpu_magics.magics.gpucluster import ClusterMagics

pytestmark = pytest.mark.gpu
cupy = pytest.importorskip("cupy")
pytest.importorskip("dask_cuda")


@pytest.fixture
def magics(
    _session_shell: InteractiveShell, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[ClusterMagics]:
    monkeypatch.setenv(cluster_records.RUNTIME_DIR_ENV, str(tmp_path))
    instance = ClusterMagics(shell=_session_shell)
    instance.wait_for_workers = False  # as in a notebook
    yield instance
    instance.close()


def test_cupy_in_the_kernel_while_the_cluster_starts(magics: ClusterMagics) -> None:
    with capture_output():
        line = "--gpus 0 --name overlap"
        magics.gpucluster(line)
    assert queries.start_under_way() is not None  # the prompt came back before the workers
    sums: list[float] = []
    while queries.start_under_way() is not None and len(sums) < 10_000:
        values = cupy.arange(1_000_000, dtype=cupy.float64)
        sums.append(float((values * 2).sum()))
    assert sums and set(sums) == {999_999_000_000.0}  # CuPy here, during the start, right every time
    client = queries.require_client()  # ready: every worker up and warm
    current = queries.active()
    assert current is not None and current.warm_s is not None
    assert all(seen.get("gpu_name") for seen in current.devices.values())  # each warmed its GPU itself
    import dask.array as da

    with cupy.cuda.Device(0):
        x = da.random.normal(10, 1, size=(4000, 4000), chunks=1000)
        mean = float(client.compute((x + 1)[::2, ::2].mean()).result())
    assert abs(mean - 11.0) < 0.05
    assert "stopped cluster 'overlap'" in stop.stop()
