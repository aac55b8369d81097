"""``%gpurun BACKEND`` as a line: every following plain cell runs on that backend, in a real IPython shell (local
backends here; the cluster in ``test_session_cluster.py``, a real GPU in ``tests/gpu``)."""

from __future__ import annotations

import copy
import dataclasses
import os
import threading
from collections.abc import Iterator
from typing import Any

import dask
import pytest
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output

from gpu_magics.display.objects.array_view import ArrayView
from gpu_magics.gpurun import backends
from gpu_magics.gpurun.session import plain_cells as session
from tests.test_gpurun import NO_GPU, inventory

# Records, per task, the thread that ran it: where the plain cell's dask work ran.
WHERE_CELL = """
import os, threading
import dask.array as da
import numpy as np
t_where = set()
def t_note(block):
    t_where.add((os.getpid(), threading.get_ident()))
    return block
t_total = int(da.ones(40, chunks=5).map_blocks(t_note, meta=np.empty(0)).sum().compute())
"""
SEED_CELL = (
    "import dask.array as da\n"
    "t_x = da.random.RandomState(42).normal(10, 1, size=(400, 400), chunks=100)\n"
    "t_value = float((t_x + 1)[::2, ::2].mean().compute())\n"
)


def cell(ip: InteractiveShell, code: str) -> tuple[Any, str]:
    """Run ``code`` as a plain cell (pre/post_run_cell fire); returns its result and everything it showed."""
    with capture_output() as captured:
        result = ip.run_cell(code)
    shown = [output.data.get("text/plain", "") for output in captured.outputs]
    return result, captured.stdout + captured.stderr + "\n".join(shown)


def line(ip: InteractiveShell, text: str) -> str:
    with capture_output() as captured:
        ip.run_line_magic("gpurun", text)
    return captured.stdout


@pytest.fixture
def shell(ip: InteractiveShell) -> Iterator[InteractiveShell]:
    with inventory(NO_GPU):
        yield ip
    for name in ("t_where", "t_note", "t_total", "t_x", "t_value"):
        ip.user_ns.pop(name, None)


def ran_on(ip: InteractiveShell) -> set[tuple[int, int]]:
    result, text = cell(ip, WHERE_CELL)
    assert result.success, text
    assert ip.user_ns["t_total"] == 40
    return set(ip.user_ns["t_where"])


def test_cpu_single_runs_plain_cells_in_the_kernels_thread(shell: InteractiveShell) -> None:
    said = line(shell, "cpu-single")
    assert (
        said.strip()
        == "%gpurun: plain cells now use cpu-single: NumPy chunks on 1 CPU thread here; %gpurun off ends it"
    )
    assert ran_on(shell) == {(os.getpid(), threading.get_ident())}
    assert "cpu-single" in line(shell, "")


def test_cpu_threads_runs_plain_cells_on_its_threads(shell: InteractiveShell) -> None:
    line(shell, "cpu-threads --workers 3")
    where = ran_on(shell)
    assert {pid for pid, _ in where} == {os.getpid()}
    assert threading.get_ident() not in {thread for _, thread in where} and 1 <= len(where) <= 3
    assert dask.config.get("num_workers") == 3


def test_off_restores_dask_settings_exactly(shell: InteractiveShell) -> None:
    dask.config.set({"array.backend": "numpy", "scheduler": "threads"})  # the user's own settings
    try:
        before = copy.deepcopy(dask.config.config)
        line(shell, "cpu-single")
        assert dask.config.get("scheduler") == "synchronous"
        cell(shell, "import dask; dask.config.set({'array.chunk-size': '64MiB'})")  # the user changes something
        dask.config.set({"array.chunk-size": before["array"]["chunk-size"]})
        said = line(shell, "off")
        assert said.startswith("%gpurun: plain cells no longer use cpu-single: this kernel's CPU threads")
        assert dask.config.config == before
    finally:
        dask.config.config.pop("scheduler", None)


def test_off_without_a_session_and_status_say_how_plain_cells_run(shell: InteractiveShell) -> None:
    before = copy.deepcopy(dask.config.config)
    assert line(shell, "off").startswith("%gpurun: plain cells run with dask's own settings: this kernel's CPU threads")
    assert line(shell, "").strip() == "plain cells: this kernel's CPU threads (NumPy chunks)"
    assert dask.config.config == before


def test_plain_cells_run_in_one_place_at_a_time(shell: InteractiveShell) -> None:
    """A backend, SPMD cells or here: choosing one ends the other, ``off`` ends either (no cluster: the SPMD line
    only says where its cells would run)."""
    before = copy.deepcopy(dask.config.config)
    transformers = list(shell.input_transformers_cleanup)
    line(shell, "cpu-single")
    assert "plain cells now run as SPMD cells on every rank" in line(shell, "spmd --init torch")
    made = session.current(shell)
    assert made is not None and made.plan is None and made.spmd is not None
    assert made.spmd.transform in shell.input_transformers_cleanup and dask.config.config == before
    assert line(shell, "").strip() == "%gpurun: plain cells run as SPMD cells (%gpurun spmd --init torch)"
    transform = made.spmd.transform
    line(shell, "cpu-threads --workers 2")
    assert made.spmd is None and transform not in shell.input_transformers_cleanup
    assert made.plan is not None and made.plan.name == "cpu-threads"
    line(shell, "spmd")
    assert made.plan is None and dask.config.config == before
    assert line(shell, "off").strip() == "%gpurun: plain cells run in this kernel again (not spmd)"
    assert made.now is None and shell.input_transformers_cleanup == transformers


def test_unload_ends_the_session(shell: InteractiveShell) -> None:
    before = copy.deepcopy(dask.config.config)
    line(shell, "cpu-single")
    shell.run_line_magic("unload_ext", "gpu_magics")
    try:
        assert dask.config.config == before
        assert session.current(shell) is None
    finally:
        shell.run_line_magic("load_ext", "gpu_magics")


def test_a_gpurun_cell_still_runs_its_own_backend_and_the_session_comes_back(shell: InteractiveShell) -> None:
    line(shell, "cpu-threads --workers 2")
    with capture_output():
        shell.run_cell_magic("gpurun", "cpu-single -q", WHERE_CELL)
    assert shell.user_ns["t_where"] == {(os.getpid(), threading.get_ident())}
    assert dask.config.get("scheduler") == "threads" and dask.config.get("num_workers") == 2
    with capture_output():
        shell.run_cell_magic("gpurun", "--compare cpu-single,cpu-threads -q -o t_cmp", SEED_CELL + "t_value\n")
    compared = shell.user_ns.pop("t_cmp")
    assert [row.result.backend for row in compared.rows] == ["cpu-single", "cpu-threads"]
    assert [row.agreement for row in compared.rows] == ["reference", "agrees"]
    assert dask.config.get("scheduler") == "threads"


def test_summary_counts_the_same_tasks_as_the_gpurun_cell(shell: InteractiveShell) -> None:
    with capture_output():
        shell.run_cell_magic("gpurun", "cpu-threads -q -o t_run", SEED_CELL)
    expected = shell.user_ns.pop("t_run").tasks
    line(shell, "cpu-threads")
    result, text = cell(shell, SEED_CELL)
    assert result.success and "dask tasks" not in text  # no summary unless asked for
    shell.run_line_magic("config", "GpuMagics.session_summary = True")
    try:
        result, text = cell(shell, SEED_CELL)
        assert result.success and shell.user_ns["t_value"] == pytest.approx(11.0, rel=0.01)
        assert f"cpu-threads · {backends.CPU_COUNT} CPU thread" in text and f"{expected:,} dask tasks" in text
        _, quiet = cell(shell, "t_y = 1 + 1")
        assert quiet == ""  # a cell that ran no dask task shows nothing
    finally:
        shell.run_line_magic("config", "GpuMagics.session_summary = False")
        shell.user_ns.pop("t_y", None)


def test_a_failing_plain_cell_fails_as_usual_and_keeps_the_session(shell: InteractiveShell) -> None:
    line(shell, "cpu-single")
    result, text = cell(shell, "raise ValueError('bad input')")
    assert isinstance(result.error_in_exec, ValueError) and "bad input" in text
    assert text.count("Traceback") <= 1 and "gpu_magics" not in text
    assert ran_on(shell) == {(os.getpid(), threading.get_ident())}


def test_an_array_of_the_other_chunk_kind_gets_the_note(shell: InteractiveShell) -> None:
    """A GPU plan (made by hand here: this machine has no GPU) and an array made earlier with NumPy chunks."""
    cell(shell, "import dask.array as da\nt_x = da.ones((10, 10), chunks=5)")
    plan = backends.BackendPlan("gpu", "1x test GPU", "cupy", config={"scheduler": "synchronous"})
    line(shell, "cpu-single")
    made = session.current(shell)
    assert made is not None
    made.use(plan)
    _, text = cell(shell, "t_total = int(t_x.sum().compute())")
    assert (
        'note: t_x has numpy chunks, so gpu computes it on the CPU; convert it once with t_x = t_x.to_backend("cupy")'
        in text
    )
    _, text = cell(shell, "t_total = 1")
    assert "note:" not in text
    view = ArrayView(shell.user_ns["t_x"], gpu_memory=False)
    assert view.info.computed_on == "NumPy chunks on this kernel's CPU threads"
    assert any('x = x.to_backend("cupy")' in hint for hint in view.info.hints)


def test_the_array_display_says_where_an_array_is_computed(shell: InteractiveShell) -> None:
    cell(shell, "import dask.array as da\nt_x = da.ones((10, 10), chunks=5)")
    view = ArrayView(shell.user_ns["t_x"], gpu_memory=False)
    assert view.info.computed_on == "this kernel's CPU threads"
    assert "  Computed on this kernel's CPU threads" in view.text().splitlines()
    line(shell, "cpu-single")
    assert ArrayView(shell.user_ns["t_x"], gpu_memory=False).info.computed_on == (
        "NumPy chunks on this kernel's CPU threads (1 CPU thread)"
    )


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "nosuch",
            "%gpurun: unknown backend 'nosuch'; choose one of cpu-single, cpu-threads, gpu, multi-gpu, auto, spmd.",
        ),
        ("multi-gpu", "%gpurun: no cluster is running: start one with %gpucluster"),
        ("--compare cpu-single,cpu-threads", "%gpurun: --compare runs one cell on several backends"),
        ("cpu-single --repeat 3", "%gpurun: --repeat times one cell"),
        ("cpu-single -o t_r", "%gpurun: -o keeps one cell's result"),
        ("--workers 2", "%gpurun: name the backend for plain cells"),
        ("gpu", "%gpurun gpu: CuPy is not installed; use cpu-threads or auto on this machine."),
        ("cpu-single --device 0", "%gpurun: --device applies to the gpu backend only, not cpu-single."),
    ],
)
def test_bad_lines_are_one_line_usage_errors_and_change_nothing(
    shell: InteractiveShell, text: str, expected: str
) -> None:
    line(shell, "cpu-threads --workers 2")
    before = copy.deepcopy(dask.config.config)
    with pytest.raises(UsageError) as caught:
        shell.run_line_magic("gpurun", text)
    message = str(caught.value)
    assert message.startswith(expected) and "\n" not in message
    assert dask.config.config == before
    made = session.current(shell)
    assert made is not None and made.plan is not None and made.plan.name == "cpu-threads"


def test_help_tells_the_line_form(ip: InteractiveShell) -> None:
    doc = ip.find_line_magic("gpurun").__doc__ or ""
    for text in ("%gpurun BACKEND", "%gpurun off", "session_summary", "plain_cells_on_cluster"):
        assert text in doc


def test_an_empty_cell_runs_with_the_session_as_without(shell: InteractiveShell) -> None:
    line(shell, "cpu-single")
    result, text = cell(shell, "")
    assert result.success and text == ""
    result, text = cell(shell, "t_value = 3")
    assert result.success and text == "" and shell.user_ns["t_value"] == 3


def test_a_plan_with_gpus_reports_its_devices() -> None:
    """``placement`` names a local GPU plan's hardware for CuPy chunks (the words the array display uses)."""
    from gpu_magics.gpurun.session import placement

    plan = backends.BackendPlan("gpu", "1x NVIDIA H100", "cupy", gpu_indices=(0,))
    assert placement.for_array(plan, "cupy") == placement.Placement("CuPy chunks on 1x NVIDIA H100")
    assert placement.for_array(plan, "other") is None
    numpy_here = placement.for_array(dataclasses.replace(plan, chunk_type="numpy", gpu_indices=()), "numpy")
    assert numpy_here is not None and numpy_here.fix is None


def test_the_session_line_is_one_short_line_with_notes_beneath() -> None:
    """``%gpurun BACKEND`` says where plain cells run in about 100 characters; a plan's notes follow, one a line."""
    from gpu_magics.gpurun import gpuless
    from gpu_magics.gpurun.backends import BackendPlan
    from gpu_magics.gpurun.session import placement

    client: Any = object()  # a plan on a cluster (the line never asks the client)
    gpus = BackendPlan("multi-gpu", "4x NVIDIA H200 (4 workers)", "cupy", client=client)
    assert placement.session_line(gpus) == (
        "%gpurun: plain cells now use multi-gpu: CuPy chunks on 4x NVIDIA H200 (4 workers); %gpurun off ends it"
    )
    remote = BackendPlan(
        "multi-gpu", "2x NVIDIA H100 (2 workers)", "cupy", client=client, notes=(gpuless.NOTE,), remote_chunks=True
    )
    first, note = placement.session_line(remote).splitlines()
    assert first.endswith("CuPy chunks on 2x NVIDIA H100 (2 workers); %gpurun off ends it") and len(first) <= 105
    assert note == f"  {gpuless.NOTE}"
    adapting = BackendPlan(
        "multi-gpu", "cluster 'gw' (no workers)", "numpy", client=client, notes=(placement.NO_GPU_WORKER,)
    )
    assert placement.session_line(adapting).endswith("(no GPU worker); %gpurun off ends it")
    local = BackendPlan("gpu", "1x NVIDIA H200 (GPU 1)", "cupy", gpu_indices=(1,))
    assert len(placement.session_line(local)) <= 100
