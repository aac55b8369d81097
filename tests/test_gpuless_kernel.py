"""A kernel without a GPU attached to GPU workers started by Dask's CLI: array cells build NumPy metadata here,
make their chunks on the workers' "device" (a stand-in for CuPy, ``tests/device_standin.py``, since CPU workers
cannot run CuPy), and bring results back as NumPy; what cannot work says so in one line."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import dask
import dask.array as da
import numpy as np
import pytest
from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output

from gpu_magics import gpus
from gpu_magics.cluster.control.verbs import stop
from gpu_magics.gpurun import gpuless
from gpu_magics.gpurun.graphs import device, remote_gpus
from tests.cli_cluster import CliCluster, cli_cluster

pytestmark = pytest.mark.slow  # Dask's CLI starts a scheduler and two workers

ROOT = Path(__file__).resolve().parents[1]
SPEC = str(ROOT / "tests" / "data" / "worker_gpus.json")
WORKER_ENV = {
    "GPU_MAGICS_SOURCE": f"fake:{SPEC}",  # each worker reports GPUs, so the cluster counts as a GPU cluster
    device.LIBRARY_VARIABLE: "tests.device_standin",
    "PYTHONPATH": str(ROOT),
}
MAKE = "da.random.RandomState(42).normal(10, 1, size=(2000, 2000), chunks=500)"
SEED = f"t_x = {MAKE}\nt_value = (t_x + 1)[::2, ::2].mean().compute()\n"


@pytest.fixture(scope="module")
def gpu_workers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[CliCluster]:
    workers = {"node-a": ("127.0.0.2", WORKER_ENV), "node-b": ("127.0.0.3", WORKER_ENV)}
    with cli_cluster(workers, tmp_path_factory.mktemp("gpuless"), worker_args=("--no-nanny", "--nthreads", "2")) as c:
        yield c


@pytest.fixture
def attached(
    ip: InteractiveShell, gpu_workers: CliCluster, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> Iterator[None]:
    monkeypatch.setenv("GPU_MAGICS_SOURCE", "fake:0")  # this kernel sees no GPU
    monkeypatch.setenv("GPU_MAGICS_RUNTIME_DIR", str(tmp_path / "runtime"))
    previous = gpus.set_inventory(None)
    stop.stop()
    with capture_output():
        ip.run_line_magic("gpucluster", f"--address {gpu_workers.address} --name gpu-workers")
    ip.run_cell("import dask.array as da, numpy as np", store_history=False)
    try:
        yield
    finally:
        stop.stop()
        gpus.set_inventory(previous)


def reference() -> float:
    """The seed on this machine's CPU (dask's synchronous scheduler, NumPy chunks)."""
    with dask.config.set(scheduler="sync", **{"array.backend": "numpy"}):
        x = da.random.RandomState(42).normal(10, 1, size=(2000, 2000), chunks=500)
        return float((x + 1)[::2, ::2].mean().compute())


def test_the_seed_runs_on_the_workers_and_comes_back_as_numpy(ip: InteractiveShell, attached: None) -> None:
    with capture_output():
        ip.run_cell_magic("gpurun", "multi-gpu -q -o t_run --no-monitor", SEED)
    result = ip.user_ns["t_run"]
    assert not result.failed
    assert gpuless.NOTE in result.notes
    value = ip.user_ns["t_value"]
    assert type(value) is np.float64 and value == pytest.approx(11.0, abs=1e-2)
    assert value == pytest.approx(reference(), rel=1e-12)  # the same seeds draw the same numbers


def test_plain_cells_in_a_session_run_the_same_way(ip: InteractiveShell, attached: None) -> None:
    """``%gpurun multi-gpu`` on a kernel without a GPU: plain cells get the same rewrite, results as NumPy."""
    with capture_output() as said:
        ip.run_line_magic("gpurun", "multi-gpu")
    line, *notes = said.stdout.strip().splitlines()
    assert line.startswith("%gpurun: plain cells now use multi-gpu: CuPy chunks on ") and len(line) <= 130  # one line
    assert any("chunks are made as CuPy on the workers' GPUs" in note and "back as NumPy" in note for note in notes)
    try:
        with capture_output() as shown:
            result = ip.run_cell(SEED)
        assert result.success, shown.stdout + shown.stderr
        value = ip.user_ns["t_value"]
        assert type(value) is np.float64 and value == pytest.approx(reference(), rel=1e-12)
        assert type(ip.user_ns["t_x"]._meta) is np.ndarray  # built here with NumPy metadata
    finally:
        with capture_output():
            ip.run_line_magic("gpurun", "off")
    assert dask.config.get("array_optimize", default=None) is None


def test_chunks_are_made_on_the_device_of_each_worker(ip: InteractiveShell, attached: None) -> None:
    cell = (
        "from distributed import futures_of, get_client\n"
        "t_kept = (da.ones((400, 400), chunks=100) * 2 + da.from_array(np.arange(160000.).reshape(400, 400),"
        " chunks=100) + da.random.default_rng(1).normal(size=(400, 400), chunks=100)).persist()\n"
        "t_types = {type(b).__name__ for b in get_client().gather(futures_of(t_kept))}\n"
        "t_where = {w for ws in get_client().who_has(t_kept).values() for w in ws}\n"
    )
    with capture_output():
        ip.run_cell_magic("gpurun", "multi-gpu -q --no-monitor", cell)
    assert ip.user_ns["t_types"] == {"ndarray"}
    assert len(ip.user_ns["t_where"]) == 2  # both workers made chunks
    kept = ip.user_ns["t_kept"]
    assert type(kept._meta) is np.ndarray  # the metadata here stays NumPy


def test_compare_between_cpu_threads_here_and_the_workers(ip: InteractiveShell, attached: None) -> None:
    cell = "(da.full((600, 600), 3.0, chunks=150) + da.arange(360000, chunks=9000).reshape(600, 600)).sum().compute()"
    with capture_output():
        ip.run_cell_magic("gpurun", "--compare cpu-threads,multi-gpu -q -o t_cmp --no-monitor", cell)
    comparison = ip.user_ns["t_cmp"]
    assert comparison.agrees and [row.agreement for row in comparison.rows] == ["reference", "agrees"]


def test_a_direct_cupy_call_here_fails_in_one_line(ip: InteractiveShell, attached: None) -> None:
    with capture_output() as shown:
        ip.run_cell_magic("gpurun", "multi-gpu -q --no-monitor", "import cupy\ncupy.ones(3)\n")
    lines = [line for line in shown.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("this kernel has no GPU, so CuPy cannot run in it"), shown.stderr
    assert "Traceback" not in shown.stdout + shown.stderr


def test_explain_leaves_other_errors_alone() -> None:
    assert gpuless.explain(ZeroDivisionError("division by zero")) is None
    assert (
        gpuless.explain(ModuleNotFoundError("No module named 'gpu_magics'", name="gpu_magics")) == gpuless.NEEDS_PACKAGE
    )


def test_the_rewrite_draws_on_the_device_and_copies_other_chunks_there() -> None:
    from dask._task_spec import convert_legacy_graph
    from dask.utils import ensure_dict

    x = da.random.RandomState(0).normal(size=(4, 4), chunks=2) + da.ones((4, 4), chunks=2)
    graph = remote_gpus.on_device(convert_legacy_graph(ensure_dict(x.__dask_graph__())))
    functions = {getattr(node, "func", None) for node in graph.values()}
    assert device.draw_random_state in functions and device.to_device in functions
    draws = [n for n in graph.values() if getattr(n, "func", None) is device.draw_random_state]
    copies = [n for n in graph.values() if getattr(n, "func", None) is device.to_device]
    assert len(draws) == 4 and len(copies) == 4  # a draw per random chunk, a copy per ones chunk


def test_a_broadcast_chunk_is_copied_as_one_value(monkeypatch: pytest.MonkeyPatch) -> None:
    from tests import device_standin

    monkeypatch.setattr(device, "library", lambda: device_standin)
    view = np.broadcast_to(np.float64(7.0), (1000, 1000))
    moved = device.to_device(view)
    assert isinstance(moved, device_standin.ndarray) and moved.shape == (1000, 1000)
    assert moved.strides == (0, 0)  # still a view of one stored value, not a million copies
    back = device.to_host({"a": [moved]})
    assert type(back["a"][0]) is np.ndarray and float(back["a"][0][3, 4]) == 7.0


def test_a_workers_gpu_error_keeps_its_traceback(ip: InteractiveShell, attached: None) -> None:
    cell = (
        "def t_fail(block):\n"
        "    raise RuntimeError('CUDA error: out of memory on the worker')\n"
        "da.ones((100, 100), chunks=50).map_blocks(t_fail, meta=np.empty((0, 0))).sum().compute()\n"
    )
    with capture_output() as shown:
        ip.run_cell_magic("gpurun", "multi-gpu -q --no-monitor", cell)
    text = shown.stdout + shown.stderr
    assert "this kernel has no GPU" not in text
    assert "out of memory on the worker" in text and "t_fail" in text  # the task's own traceback
