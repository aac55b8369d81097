"""``%%gpurun`` in a real IPython shell, on the CPU backends."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

import dask
import pytest
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell

from gpu_magics import gpus as devices
from gpu_magics.gpurun import execute as run_module
from gpu_magics.gpurun.results import CompareResult, RunResult

SEED_CELL = """
import dask.array as da
t_x = da.random.RandomState(42).normal(10, 1, size=(400, 400), chunks=100)
(t_x + 1)[::2, ::2].mean().compute()
"""


@contextlib.contextmanager
def inventory(found: devices.GpuInventory) -> Iterator[None]:
    """Pretend the machine's GPUs are ``found`` for the duration."""
    previous = devices.set_inventory(found)
    try:
        yield
    finally:
        devices.set_inventory(previous)


NO_GPU = devices.StaticInventory(reason="CuPy is not installed")


def run(ip: InteractiveShell, line: str, cell: str) -> object:
    return ip.run_cell_magic("gpurun", line, cell)


def test_load_registers_and_unload_removes(ip: InteractiveShell) -> None:
    assert ip.find_cell_magic("gpurun") is not None
    assert any(type(c).__name__ == "GpuMagics" for c in ip.configurables)
    ip.run_line_magic("unload_ext", "gpu_magics")
    try:
        assert ip.find_cell_magic("gpurun") is None
        assert not any(type(c).__name__ == "GpuMagics" for c in ip.configurables)
    finally:
        ip.run_line_magic("load_ext", "gpu_magics")
    assert ip.find_cell_magic("gpurun") is not None


def test_help_is_the_docstring(ip: InteractiveShell) -> None:
    doc = ip.find_cell_magic("gpurun").__doc__
    assert "--compare" in doc and "cpu-single" in doc and "multi-gpu" in doc


@pytest.mark.parametrize("backend", ["cpu-single", "cpu-threads"])
def test_cpu_backends_compute_and_summarize(ip: InteractiveShell, backend: str) -> None:
    value = run(ip, f"{backend} -o t_result", SEED_CELL)
    assert value == pytest.approx(11.0, rel=0.01)
    result = ip.user_ns["t_result"]
    assert isinstance(result, RunResult)
    assert result.backend == backend
    assert result.tasks is not None and result.tasks > 16
    assert len(result.times) == 1 and result.times[0] > 0
    text = str(result)
    assert backend in text and "dask task" in text and "CPU thread" in text
    assert "<b>" in result._repr_html_()


def test_backend_sets_dask_config_only_for_the_cell(ip: InteractiveShell) -> None:
    before = dask.config.get("scheduler", None)
    seen = run(ip, "cpu-single", "import dask\n(dask.config.get('scheduler'), dask.config.get('array.backend'))")
    assert seen == ("synchronous", "numpy")
    seen = run(
        ip, "cpu-threads --workers 2", "import dask\n(dask.config.get('scheduler'), dask.config.get('num_workers'))"
    )
    assert seen == ("threads", 2)
    assert dask.config.get("scheduler", None) == before


def test_workers_names_the_thread_count(ip: InteractiveShell) -> None:
    run(ip, "cpu-threads --workers 3 -o t_r", "1")
    assert ip.user_ns["t_r"].hardware == "3 CPU threads"


def test_last_expression_lands_in_out(ip: InteractiveShell) -> None:
    outcome = ip.run_cell("%%gpurun cpu-single\nt_a = 20\nt_a + 22\n", store_history=True)
    assert outcome.success and outcome.result == 42
    assert ip.user_ns["Out"][outcome.execution_count] == 42
    assert ip.user_ns["t_a"] == 20


def test_trailing_semicolon_hides_the_value(ip: InteractiveShell) -> None:
    assert run(ip, "cpu-single -q", "40 + 2;") is None


def test_user_exception_shows_user_traceback(ip: InteractiveShell, capsys: pytest.CaptureFixture[str]) -> None:
    outcome = ip.run_cell("%%gpurun cpu-single\ndef t_f():\n    return 1 / 0\nt_f()\n")
    out = capsys.readouterr()
    text = out.out + out.err
    assert "ZeroDivisionError" in text
    assert "t_f()" in text and "return 1 / 0" in text
    assert "gpu_magics" not in text and "run_once" not in text
    assert "failed" in text
    assert text.count("Traceback (most recent call last)") == 1  # shown once
    assert not outcome.success  # the cell failed, as a plain failing cell does: Jupyter's reply is "error"
    assert isinstance(outcome.error_in_exec, ZeroDivisionError)
    assert outcome.result is None


def test_a_successful_cell_still_succeeds(ip: InteractiveShell) -> None:
    outcome = ip.run_cell("%%gpurun cpu-single -q\n6 * 7\n")
    assert outcome.success and outcome.result == 42


def test_compare_with_a_failing_backend_fails_the_cell(ip: InteractiveShell) -> None:
    outcome = ip.run_cell("%%gpurun --compare cpu-single,cpu-threads -q\nraise ValueError('boom')\n")
    assert not outcome.success and isinstance(outcome.error_in_exec, ValueError)


def test_syntax_error_is_shown_without_running(ip: InteractiveShell, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(ip, "cpu-single", "t_y = 1\ndef (:") is None
    text = "".join(capsys.readouterr())
    assert "SyntaxError" in text
    assert "t_y" not in ip.user_ns


def test_repeat_reports_best_and_median(ip: InteractiveShell) -> None:
    run(ip, "cpu-single --repeat 3 -o t_r", "sum(range(1000))")
    result = ip.user_ns["t_r"]
    assert len(result.times) == 3
    assert result.best <= result.median
    assert "best" in str(result) and "median" in str(result) and "of 3 runs" in str(result)


def test_quiet_shows_no_summary(ip: InteractiveShell, capsys: pytest.CaptureFixture[str]) -> None:
    capsys.readouterr()
    run(ip, "cpu-single -q", "t_q = 1")
    assert "cpu-single" not in capsys.readouterr().out
    run(ip, "cpu-single", "t_q = 1")
    assert "cpu-single" in capsys.readouterr().out


def test_compare_table_agreement_and_chart(ip: InteractiveShell) -> None:
    value = run(ip, "--compare cpu-single,cpu-threads -o t_cmp", SEED_CELL)
    assert value == pytest.approx(11.0, rel=0.01)
    comparison = ip.user_ns["t_cmp"]
    assert isinstance(comparison, CompareResult)
    assert [row.result.backend for row in comparison.rows] == ["cpu-single", "cpu-threads"]
    assert comparison.rows[0].agreement == "reference" and comparison.rows[0].speedup == 1.0
    assert comparison.rows[1].agreement == "agrees"
    assert comparison.agrees
    expected = comparison.rows[0].result.wall_time / comparison.rows[1].result.wall_time
    assert comparison.rows[1].speedup == pytest.approx(expected)
    html = comparison._repr_html_()
    assert "<table" in html and "<svg" in html and "cpu-threads" in html
    assert "speed-up" in str(comparison)
    assert comparison["cpu-threads"].backend == "cpu-threads"


def test_compare_detects_disagreement(ip: InteractiveShell) -> None:
    cell = "import dask\n1.0 if dask.config.get('scheduler') == 'synchronous' else 1.5"
    run(ip, "--compare cpu-single,cpu-threads -q -o t_cmp", cell)
    comparison = ip.user_ns["t_cmp"]
    assert comparison.rows[1].agreement.startswith("differs")
    assert not comparison.agrees


def test_compare_stops_at_a_failure(ip: InteractiveShell) -> None:
    cell = "import dask\nassert dask.config.get('scheduler') == 'synchronous'\n1"
    run(ip, "--compare cpu-single,cpu-threads -q -o t_cmp", cell)
    comparison = ip.user_ns["t_cmp"]
    assert comparison.rows[1].agreement == "failed" and comparison.rows[1].result.failed


def test_config_default_backend(ip: InteractiveShell) -> None:
    ip.run_line_magic("config", 'GpuMagics.default_backend = "cpu-single"')
    try:
        run(ip, "-q -o t_r", "1")
        assert ip.user_ns["t_r"].backend == "cpu-single"
    finally:
        ip.run_line_magic("config", 'GpuMagics.default_backend = "auto"')


def test_auto_without_gpu_says_it_picked_cpu_threads(ip: InteractiveShell) -> None:
    with inventory(NO_GPU):
        run(ip, "-q -o t_r", "1")
    result = ip.user_ns["t_r"]
    assert result.backend == "cpu-threads"
    assert any("auto picked cpu-threads" in note and "CuPy is not installed" in note for note in result.notes)
    assert "auto picked cpu-threads" in str(result)


def test_numpy_chunks_are_flagged_on_a_cupy_backend(ip: InteractiveShell) -> None:
    from gpu_magics.gpurun import backends
    from gpu_magics.gpurun import execute as run_module

    ip.run_cell("import dask.array as da\nt_n = da.ones((10, 10), chunks=5)")
    compiled = run_module.compile_cell(ip, "t_n.sum()")
    assert compiled is not None
    plan = backends.BackendPlan(name="gpu", hardware="1x test", chunk_type="cupy")
    notes = run_module.chunk_mismatches(ip, compiled.names, plan)
    assert len(notes) == 1 and 't_n = t_n.to_backend("cupy")' in notes[0]
    cpu_plan = backends.BackendPlan(name="cpu-threads", hardware="2 CPU threads", chunk_type="numpy")
    assert run_module.chunk_mismatches(ip, compiled.names, cpu_plan) == []


def test_empty_cell_runs(ip: InteractiveShell) -> None:
    assert run(ip, "cpu-single -q -o t_r", "pass") is None
    assert ip.user_ns["t_r"].tasks is None


# --- bad input: one-line UsageErrors, nothing run -------------------------------------------------------


BAD_LINES = {
    "quantum": "unknown backend 'quantum'; choose one of cpu-single, cpu-threads, gpu, multi-gpu, auto, spmd",
    "cpu-threads --turbo": "unrecognized arguments: --turbo (valid options:",
    "cpu-threads --repeat 0": "expected a number of at least 1",
    "cpu-threads --repeat many": "expected a whole number, got 'many'",
    "cpu-threads --workers -2": "expected a number of at least 1",
    "gpu --device x": "expected a GPU index (0, 1, ...) or free, got 'x'",
    "gpu --device -1": "expected a GPU index (0, 1, ...) or free, got '-1'",
    "cpu-threads --device free": "--device applies to the gpu backend only, not cpu-threads",
    "gpu --device free": "%%gpurun --device free: no GPU to choose from",
    "cpu-threads --rtol -1": "expected a number above 0",
    'cpu-threads -o "t_r': "No closing quotation",
    "--compare cpu-single,warp": "unknown backend 'warp'",
    "--compare cpu-single,cpu-single": "lists a backend twice",
    "--compare ,": "--compare needs backends",
    "--compare cpu-single,,cpu-threads": "--compare 'cpu-single,,cpu-threads' has an empty entry",
    "--compare cpu-single,cpu-threads,": "has an empty entry: separate backends with single commas",
    "--compare ,gpu": "has an empty entry",
    "gpu --compare cpu-single,gpu": "either a backend or --compare",
    "cpu-threads --device 1": "--device applies to the gpu backend only",
    "cpu-single --workers 2": "--workers applies to cpu-threads and gpu only",
    "cpu-single -o 2x": "is not a valid Python name",
    "cpu-single -o class": "invalid variable name 'class': it is a Python keyword; choose another",
    "cpu-single -o print": "invalid variable name 'print': it would hide Python's built-in print; choose another",
    "cpu-single --repeat 1000000000": "expected at most 1000 runs, got 1000000000",
    "--compare cpu-threads": "--compare needs two backends or more",
    "gpu": "CuPy is not installed; use cpu-threads or auto on this machine",
    "multi-gpu": "%gpucluster",
}


@pytest.mark.parametrize("line", list(BAD_LINES))
def test_bad_input_is_a_one_line_usage_error(ip: InteractiveShell, line: str) -> None:
    threads_before = threading.active_count()
    with inventory(NO_GPU), pytest.raises(UsageError) as caught:
        run(ip, line, "t_ran = True")
    message = str(caught.value)
    assert BAD_LINES[line] in message
    assert "\n" not in message
    assert "t_ran" not in ip.user_ns
    assert threading.active_count() <= threads_before


def test_device_out_of_range_names_visible_gpus(ip: InteractiveShell) -> None:
    one_gpu = devices.StaticInventory([devices.GpuDevice(0, "NVIDIA H200", 141 * 2**30)])
    with inventory(one_gpu), pytest.raises(UsageError, match=r"there is no GPU 9; visible GPUs: 0 \(NVIDIA H200\)"):
        run(ip, "gpu --device 9", "t_ran = True")
    assert "t_ran" not in ip.user_ns


def test_usage_error_shows_no_traceback(ip: InteractiveShell, capsys: pytest.CaptureFixture[str]) -> None:
    ip.run_cell("%%gpurun quantum\nt_ran = True\n")
    text = "".join(capsys.readouterr())
    assert "UsageError" in text and "unknown backend" in text
    assert "Traceback" not in text and "---->" not in text


def test_compare_all_runs_what_this_machine_can(ip: InteractiveShell) -> None:
    with inventory(NO_GPU):
        run(ip, "--compare all -q -o t_cmp", "21 * 2")
    comparison = ip.user_ns["t_cmp"]
    assert [row.result.backend for row in comparison.rows] == ["cpu-single", "cpu-threads"]
    assert comparison.rows[0].result.notes == ()  # skipped backends are not the reference's notes
    assert [name for name, _ in comparison.skipped] == ["gpu", "multi-gpu"]
    skipped = str(comparison).splitlines()[-1].strip()
    assert skipped.startswith("Skipped: gpu (CuPy is not installed); multi-gpu (")
    assert "note" not in str(comparison)
    html = comparison._repr_html_()
    assert html.index("Skipped: gpu") < html.index("<svg")  # under the table, above the bars


def test_compare_with_one_backend_is_refused(ip: InteractiveShell) -> None:
    with pytest.raises(UsageError) as caught:
        run(ip, "--compare cpu-single -q -o t_cmp", "t_ran = True")
    assert str(caught.value) == (
        "%%gpurun: --compare needs two backends or more, like --compare cpu-single,gpu (or --compare all); to run "
        "on cpu-single alone, write %%gpurun cpu-single."
    )
    assert "t_cmp" not in ip.user_ns and "t_ran" not in ip.user_ns


def test_arrays_the_cell_makes_itself_are_not_flagged(ip: InteractiveShell) -> None:
    from gpu_magics.gpurun import backends
    from gpu_magics.gpurun import execute as run_module

    ip.run_cell("import dask.array as da\nt_n = da.ones((10, 10), chunks=5)\nt_m = t_n")
    compiled = run_module.compile_cell(ip, "t_n = da.ones((10, 10), chunks=5)\n(t_n + t_m).sum()")
    assert compiled is not None
    plan = backends.BackendPlan(name="gpu", hardware="1x test", chunk_type="cupy")
    notes = run_module.chunk_mismatches(ip, compiled.names, plan)
    assert len(notes) == 1 and notes[0].startswith("t_m has numpy chunks")


@pytest.mark.parametrize(
    "cell",
    [
        "import asyncio\nt_ran = True\nawait asyncio.sleep(0)\n",
        "import asyncio\nt_ran = [await asyncio.sleep(0, i) for i in range(2)]\n",
        "t_ran = True\nasync for t_i in t_source():\n    pass\n",
        "async with t_lock:\n    t_ran = True\n",
    ],
)
def test_top_level_await_is_a_one_line_usage_error(
    ip: InteractiveShell, capsys: pytest.CaptureFixture[str], cell: str
) -> None:
    with pytest.raises(UsageError) as caught:
        run(ip, "cpu-single", cell)
    message = str(caught.value)
    assert "top-level await" in message and "\n" not in message
    assert "t_ran" not in ip.user_ns  # nothing of the cell ran
    outcome = ip.run_cell(f"%%gpurun cpu-single\n{cell}")
    text = "".join(capsys.readouterr())
    assert "top-level await" in text
    assert "Traceback" not in text and "gpu_magics" not in text and "SyntaxError" not in text
    assert not outcome.success


def test_await_inside_a_function_still_runs(ip: InteractiveShell) -> None:
    cell = "import asyncio\nasync def t_f():\n    await asyncio.sleep(0)\n    return 7\nasyncio.run(t_f())\n"
    assert run(ip, "cpu-single -q", cell) == 7


COLD_FIRST = "import time\nt_runs.append(1)\ntime.sleep(0.4 if len(t_runs) == 1 else 0.0)\nlen(t_runs) > 0"


def test_compare_times_each_backend_warm(ip: InteractiveShell) -> None:
    """A first run that pays one-off costs (here: a sleep on the very first run) is a warm-up, not a figure:
    no impossible speed-up for the second backend."""
    ip.user_ns["t_runs"] = []
    run(ip, "--compare cpu-single,cpu-threads -q -o t_cmp", COLD_FIRST)
    comparison = ip.user_ns["t_cmp"]
    assert len(ip.user_ns["t_runs"]) == 4  # each backend: a warm-up, then the timed run
    first, second = (row.result for row in comparison.rows)
    assert first.cold_run is not None and first.cold_run >= 0.4 and first.wall_time < 0.3
    assert second.cold_run is not None and not first.cold and not second.cold
    assert len(first.times) == len(second.times) == 1
    assert "warm times: each backend ran the cell once before it was timed (first runs: cpu-single " in str(comparison)
    assert comparison.to_json()["rows"][0]["cold_run"] == first.cold_run


def test_compare_marks_a_long_first_run_cold(ip: InteractiveShell, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(run_module, "WARM_UP_LIMIT", 0.2)  # the 0.4 s first run is "long": not run twice
    ip.user_ns["t_runs"] = []
    run(ip, "--compare cpu-single,cpu-threads --repeat 2 -q -o t_cmp", COLD_FIRST)
    comparison = ip.user_ns["t_cmp"]
    first, second = (row.result for row in comparison.rows)
    assert first.cold and first.cold_run is None and len(first.times) == 2 and max(first.times) >= 0.4
    assert not second.cold and second.cold_run is not None and len(second.times) == 2
    assert len(ip.user_ns["t_runs"]) == 5
    assert "cpu-single: timed cold (a long first run is not repeated)" in str(comparison)


def test_a_single_backend_cell_runs_once(ip: InteractiveShell) -> None:
    ip.user_ns["t_runs"] = []
    run(ip, "cpu-single -q -o t_one", COLD_FIRST)
    assert len(ip.user_ns["t_runs"]) == 1 and ip.user_ns["t_one"].cold_run is None


def test_the_line_expands_names_as_ipython_does(ip: InteractiveShell) -> None:
    """``$name`` and ``{expression}`` in a ``%%gpurun`` line come from the notebook's names (the magic expands its
    line itself, and only where it has one of them)."""
    ip.user_ns.update(t_backend="cpu-single", t_threads=3)
    result = ip.run_cell("%%gpurun $t_backend -q -o t_run\n1 + 1")
    assert result.success and result.result == 2 and ip.user_ns["t_run"].backend == "cpu-single"
    assert ip.run_cell("%%gpurun cpu-threads --workers {t_threads - 1} -q -o t_run\n1").success
    assert ip.user_ns["t_run"].hardware == "2 CPU threads"


def test_a_cell_run_again_sees_a_transformer_added_between(ip: InteractiveShell) -> None:
    """The cell's transformed text is kept for the next run of the same cell, but an input transformer added
    in between applies to it."""
    cell = "%%gpurun cpu-single -q\nt_value = 1"
    assert ip.run_cell(cell).success and ip.user_ns["t_value"] == 1

    def two(lines: list[str]) -> list[str]:
        return [line.replace("t_value = 1", "t_value = 2") for line in lines]

    ip.input_transformers_post.append(two)
    try:
        assert ip.run_cell(cell).success and ip.user_ns["t_value"] == 2
    finally:
        ip.input_transformers_post.remove(two)
    assert ip.run_cell(cell).success and ip.user_ns["t_value"] == 1
