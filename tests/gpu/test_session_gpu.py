"""The session backend on a real GPU: after ``%gpurun multi-gpu`` (or ``gpu``) a plain cell makes CuPy chunks and
computes them on the GPU, with the seed's value; ``off`` puts NumPy chunks back."""

from __future__ import annotations

import os

import pytest
from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output

from gpu_magics.cluster.control import queries

# The plain cell (20000^2, 5000^2 chunks); each chunk also says where it was computed.
PLAIN_CELL = """
import os
import dask.array as da
t_x = da.random.normal(10, 1, size=(20000, 20000), chunks=5000)
t_value = float((t_x + 1)[::2, ::2].mean().compute())
def t_where(block):
    import cupy
    return cupy.asarray([os.getpid(), cupy.cuda.runtime.getDevice(), isinstance(block, cupy.ndarray)])[None, :]
t_seen = t_x.map_blocks(t_where, chunks=(1, 3), dtype=float).compute()
"""


@pytest.fixture(scope="module")
def shell(loaded_shell: InteractiveShell) -> InteractiveShell:
    return loaded_shell


def run(shell: InteractiveShell, code: str) -> str:
    with capture_output() as captured:
        result = shell.run_cell(code)
    assert result.success, captured.stdout + captured.stderr
    return captured.stdout + "\n".join(o.data.get("text/plain", "") for o in captured.outputs)


def seen(shell: InteractiveShell) -> tuple[set[int], set[int], bool]:
    """The processes and devices that computed the chunks, and whether every chunk was CuPy."""
    table = shell.user_ns["t_seen"]
    table = table.get() if hasattr(table, "get") else table
    return {int(row[0]) for row in table}, {int(row[1]) for row in table}, bool(all(row[2] for row in table))


def test_plain_cells_on_the_clusters_gpu(shell: InteractiveShell) -> None:
    text = run(shell, "%gpucluster --gpus 0 --replace")
    assert "plain cells: NumPy chunks on the workers' CPUs, the GPUs idle; %gpurun multi-gpu" in text
    assert "%gpurun multi-gpu" in text
    said = run(shell, "%gpurun multi-gpu")
    assert "plain cells now use multi-gpu: CuPy chunks on 1x " in said and said.rstrip().endswith("%gpurun off ends it")
    assert len(said.strip().splitlines()[0]) <= 120  # one line (111 with the model "NVIDIA H100 80GB HBM3")
    run(shell, PLAIN_CELL)
    assert type(shell.user_ns["t_x"]._meta).__module__.split(".")[0] == "cupy"
    assert shell.user_ns["t_value"] == pytest.approx(11.0, abs=1e-3)
    pids, _, all_cupy = seen(shell)
    workers = set(queries.require_client().run(os.getpid).values())
    assert pids <= workers and os.getpid() not in pids and all_cupy
    assert "plain cells: multi-gpu, CuPy chunks" in run(shell, "%gpucluster status")
    run(shell, "%gpurun off")
    run(shell, "import dask.array as da\nt_y = da.ones((100, 100), chunks=50)")
    assert type(shell.user_ns["t_y"]._meta).__module__ == "numpy"
    run(shell, "%gpucluster stop")


def test_plain_cells_on_the_kernels_gpu(shell: InteractiveShell) -> None:
    said = run(shell, "%gpurun gpu --device 0")
    assert "plain cells now use gpu: CuPy chunks on 1x" in said
    run(shell, PLAIN_CELL)
    assert shell.user_ns["t_value"] == pytest.approx(11.0, abs=1e-3)
    pids, devices, all_cupy = seen(shell)
    assert pids == {os.getpid()} and devices == {0} and all_cupy
    shell.run_line_magic("config", "GpuMagics.session_summary = True")
    try:
        text = run(shell, "t_value = float((t_x + 1)[::2, ::2].mean().compute())")
    finally:
        shell.run_line_magic("config", "GpuMagics.session_summary = False")
    assert "gpu · 1x" in text and "dask tasks" in text and "GPU busy" in text
    run(shell, "%gpurun off")
