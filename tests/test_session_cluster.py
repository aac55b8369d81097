"""The session backend with a real cluster (``%gpucluster --cpu-workers 2``, real worker processes): plain cells on
the cluster or on local threads, the same tasks as a ``%%gpurun`` cell, what ``%gpucluster`` says and writes, and
what a stopped cluster leaves plain cells on."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dask
import pytest
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output

from gpu_magics.cluster.control import queries
from gpu_magics.display.objects.array_view import ArrayView
from gpu_magics.gpurun.session import plain_cells as session
from tests.test_gpurun import NO_GPU, inventory
from tests.test_session_backend import SEED_CELL, WHERE_CELL, cell, line

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def shell(loaded_shell: InteractiveShell) -> Iterator[InteractiveShell]:
    """The loaded test shell, on a machine without a GPU, for the module (clusters outlive tests)."""
    with inventory(NO_GPU):
        yield loaded_shell


def gpucluster(shell: InteractiveShell, text: str) -> str:
    with capture_output() as captured:
        shell.run_line_magic("gpucluster", text)
    return captured.stdout + "\n".join(output.data.get("text/plain", "") for output in captured.outputs)


@pytest.fixture
def up(shell: InteractiveShell) -> Iterator[str]:
    """A 2-worker CPU cluster (started unless one runs); its start output. Plain cells end back on dask's settings."""
    said = "" if queries.active() is not None else gpucluster(shell, "--cpu-workers 2 --name session")
    yield said
    line(shell, "off")


def worker_pids() -> set[int]:
    return set(queries.require_client().run(os.getpid).values())


def record() -> dict[str, Any]:
    current = queries.active()
    assert current is not None and current.record_path is not None
    return dict(json.loads(Path(current.record_path).read_text()))


def test_gpucluster_says_how_plain_cells_run(shell: InteractiveShell, up: str) -> None:
    text = gpucluster(shell, "status")
    assert "plain cells: the cluster's CPU workers with dask's own graph; %gpurun multi-gpu runs the tuned graph" in (
        text
    )
    line(shell, "multi-gpu")
    assert "plain cells: multi-gpu, NumPy chunks on the cluster (2 CPU workers" in gpucluster(shell, "status")
    assert record()["plain_cells"] == "multi-gpu"
    line(shell, "cpu-threads")  # on this kernel's threads: the side panel's card says so too, as status does
    assert "plain cells: cpu-threads" in gpucluster(shell, "status")
    assert record()["plain_cells"] == "cpu-threads"
    line(shell, "off")
    assert record()["plain_cells"] is None


def test_multi_gpu_runs_plain_cells_on_the_workers_with_the_cells_tasks(shell: InteractiveShell, up: str) -> None:
    said = line(shell, "multi-gpu")
    assert said.strip() == (
        "%gpurun: plain cells now use multi-gpu: NumPy chunks on 2 CPU workers x 1 thread; %gpurun off ends it"
    )  # a CPU cluster: its hardware says there is no GPU worker
    result, text = cell(shell, WHERE_CELL)
    assert result.success, text
    assert {pid for pid, _ in shell.user_ns["t_where"]} <= worker_pids()
    with capture_output():
        shell.run_cell_magic("gpurun", "multi-gpu -q -o t_run", SEED_CELL)
    expected = shell.user_ns.pop("t_run").tasks
    shell.run_line_magic("config", "GpuMagics.session_summary = True")
    try:
        result, text = cell(shell, SEED_CELL)
    finally:
        shell.run_line_magic("config", "GpuMagics.session_summary = False")
    assert result.success and shell.user_ns["t_value"] == pytest.approx(11.0, rel=0.01)
    assert "multi-gpu · 2 CPU workers" in text and f"{expected:,} dask tasks" in text and "time:" in text


def test_cpu_threads_with_a_cluster_up_runs_plain_cells_here(shell: InteractiveShell, up: str) -> None:
    line(shell, "cpu-threads --workers 2")
    cell(shell, WHERE_CELL)
    assert {pid for pid, _ in shell.user_ns["t_where"]} == {os.getpid()}
    line(shell, "off")
    cell(shell, WHERE_CELL)  # dask's own settings: the cluster's client is the default
    assert {pid for pid, _ in shell.user_ns["t_where"]} <= worker_pids()


def test_the_array_display_says_the_cluster_computes_it(shell: InteractiveShell, up: str) -> None:
    cell(shell, "import dask.array as da\nt_x = da.ones((10, 10), chunks=5)")
    assert ArrayView(shell.user_ns["t_x"], gpu_memory=False).info.computed_on == "the cluster's CPU workers"


def test_stop_says_where_plain_cells_run_now_and_restores_dask(shell: InteractiveShell, up: str) -> None:
    missing = object()
    line(shell, "multi-gpu")
    made = session.current(shell)
    assert made is not None and made.plan is not None
    keys = [key for key in made.plan.config if key != "scheduler"]  # the client's own: it goes with the cluster
    assert keys  # array.backend, the graph tuning
    line(shell, "off")
    before = {key: dask.config.get(key, default=missing) for key in keys}
    line(shell, "multi-gpu")
    text = gpucluster(shell, "stop")
    assert "%gpurun: plain cells no longer run on the cluster (multi-gpu)" in text
    assert text.strip().endswith("stopped cluster 'session'")
    assert {key: dask.config.get(key, default=missing) for key in keys} == before
    assert dask.config.get("scheduler", default=None) is None
    cell(shell, WHERE_CELL)
    assert {pid for pid, _ in shell.user_ns["t_where"]} == {os.getpid()}
    with pytest.raises(UsageError, match=r"^%gpurun: no cluster is running"):
        shell.run_line_magic("gpurun", "multi-gpu")


def test_the_setting_runs_plain_cells_on_every_new_cluster(shell: InteractiveShell) -> None:
    shell.run_line_magic("config", "ClusterMagics.plain_cells_on_cluster = True")
    try:
        text = gpucluster(shell, "--cpu-workers 1 --name every --replace")
    finally:
        shell.run_line_magic("config", "ClusterMagics.plain_cells_on_cluster = False")
    assert "%gpurun: plain cells now use multi-gpu" in text and "plain cells: multi-gpu" in text
    cell(shell, WHERE_CELL)
    assert {pid for pid, _ in shell.user_ns["t_where"]} <= worker_pids()
    assert record()["plain_cells"] == "multi-gpu"
    gpucluster(shell, "stop")


def test_stop_says_what_it_drops_and_a_persisted_array_says_its_data_is_gone(shell: InteractiveShell, up: str) -> None:
    with capture_output():
        assert shell.run_cell("import dask.array as da\nkept = da.ones((4, 4), chunks=2).persist()").success
    assert "Computed on" in ArrayView(shell.user_ns["kept"]).text()
    said = gpucluster(shell, "stop")
    assert "the 4 pieces of data kept on its workers (persisted chunks, futures) are gone" in said
    view = ArrayView(shell.user_ns["kept"])
    assert "nowhere: its data is gone" in view.text() and "persist it again" in view.html()
    del shell.user_ns["kept"]
