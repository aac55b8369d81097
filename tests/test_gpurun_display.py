"""What ``%%gpurun`` leaves in a notebook: one output, the live panel then the summary, headline first."""

from __future__ import annotations

import dataclasses

from display_recording import recording
from IPython.core.interactiveshell import InteractiveShell

from gpu_magics.gpurun.results import CompareResult, CompareRow, RunResult


def test_the_summary_replaces_the_live_panel(ip: InteractiveShell) -> None:
    with recording(ip) as shown:
        ip.run_cell_magic("gpurun", "cpu-threads", "sum(i * i for i in range(100_000))")
    outputs = shown.outputs()
    assert len(outputs) == 1, outputs  # the live panel's output became the summary: nothing left empty
    first = shown.messages[0]  # the live panel, titled with the backend
    assert "gpu-magics-monitor" in first.data["text/html"] and first.data["text/plain"].startswith("cpu-threads · ")
    (final,) = outputs.values()
    text, html = final["text/plain"], final["text/html"]
    assert text.splitlines()[0].startswith("cpu-threads · ")
    assert text.count("host CPU") == 1 and html.count("host CPU") == 1
    assert html.index("cpu-threads") < html.index("host CPU") < html.index("<svg")  # headline, figures, chart
    assert "\u23f1" not in html and "&#9201;" not in html and "\u23f1" not in text


def test_compare_leaves_one_output_and_no_empty_ones(ip: InteractiveShell) -> None:
    with recording(ip) as shown:
        ip.run_cell_magic("gpurun", "--compare cpu-single,cpu-threads", "21 * 2")
    outputs = shown.outputs()
    assert len(outputs) == 1
    (final,) = outputs.values()
    assert "speed-up" in final["text/plain"] and "gpu-magics-compare" in final["text/html"]


def test_quiet_shows_nothing(ip: InteractiveShell) -> None:
    with recording(ip) as shown:
        ip.run_cell_magic("gpurun", "cpu-single -q", "1")
    assert shown.messages == []


def test_a_terminal_gets_the_summary_only(ip: InteractiveShell) -> None:
    with recording(ip, kernel=False) as shown:
        ip.run_cell_magic("gpurun", "cpu-single", "1")
    assert len(shown.messages) == 1 and shown.messages[0].data["text/plain"].startswith("cpu-single · ")


def run(backend: str, times: tuple[float, ...], notes: tuple[str, ...] = ()) -> RunResult:
    return RunResult(backend=backend, hardware="8 CPU threads", times=times, tasks=12, notes=notes)


def test_compare_table_aligns_numbers_right_in_header_and_cells() -> None:
    comparison = CompareResult(
        (
            CompareRow(run("cpu-single", (2.5, 2.6, 2.7)), 1.0, "reference"),
            CompareRow(run("cpu-threads", (0.25, 0.3, 0.31), ("x has cupy chunks",)), 10.0, "agrees"),
        ),
        skipped=(("gpu", "CuPy is not installed"), ("multi-gpu", "no cluster: `%gpucluster`")),
    )
    html = comparison._repr_html_()
    for name in ("best", "median", "speed-up"):
        assert f"<th style='text-align:right;padding:2px 8px;font-weight:600'>{name}</th>" in html
    assert "<td style='text-align:right;padding:2px 8px'>10.00x</td>" in html
    assert "<th style='text-align:left;padding:2px 8px;font-weight:600'>backend</th>" in html
    assert "font-size:12px" not in html and "var(--jp-ui-font-size1" in html  # the theme's type scale
    assert html.count("best of 3") == 2  # on the bars
    text = str(comparison).splitlines()
    assert text[0].split() == ["backend", "hardware", "best", "median", "speed-up", "agreement"]
    assert text[-2] == "  cpu-threads: x has cupy chunks"
    assert text[-1] == "  Skipped: gpu (CuPy is not installed); multi-gpu (no cluster: `%gpucluster`)"
    assert comparison.to_json()["skipped"][0] == {"backend": "gpu", "reason": "CuPy is not installed"}


def test_text_table_right_aligns_number_columns() -> None:
    comparison = CompareResult(
        (
            CompareRow(run("cpu-single", (12.5,)), 1.0, "reference"),
            CompareRow(run("cpu-threads", (0.5,)), 25.0, "agrees"),
        )
    )
    header, first, second = str(comparison).splitlines()
    end = header.index("wall time") + len("wall time")
    assert first[:end].endswith("12.5 s") and second[:end].endswith("500 ms")
    end = header.index("speed-up") + len("speed-up")
    assert first[:end].endswith("1.00x") and second[:end].endswith("25.00x")


def test_a_failed_cells_headline_says_what_its_task_count_counts() -> None:
    failed = RunResult(backend="multi-gpu", hardware="2 CPU workers", times=(1.5,), tasks=17, failed=True)
    assert failed.headline().endswith("· failed after 17 dask tasks finished")
    assert (
        RunResult(backend="gpu", hardware="1x GPU", times=(0.1,), tasks=None, failed=True)
        .headline()
        .endswith("· failed")
    )
    assert run("gpu", (0.1,)).headline().endswith("· 12 dask tasks")


def test_noisy_timings_are_said_once_with_the_option_that_steadies_them() -> None:
    """A warm run slower than the first (3.02 s after 1.85 s), or runs far apart: one line says the timings
    were noisy and how to steady them; steady ones say nothing of noise."""
    slow_warm = dataclasses.replace(run("cpu-threads", (3.02,)), cold_run=1.85)
    steady = dataclasses.replace(run("cpu-single", (2.5,)), cold_run=2.9)
    noisy = CompareResult((CompareRow(steady, 1.0, "reference"), CompareRow(slow_warm, 0.83, "agrees")))
    said = [note for note in noisy.notes() if "noisy" in note]
    assert said == [
        "the timings were noisy (cpu-threads's warm run (3.02 s) took longer than its first (1.85 s)): run the "
        "cell again with --repeat 5 for a best and a median of several runs"
    ]
    assert said[0] in str(noisy) and "--repeat 5" in noisy._repr_html_()
    spread = CompareResult((CompareRow(run("cpu-single", (1.0, 1.1, 2.4)), 1.0, "reference"),))
    assert "cpu-single's runs spread from 1.00 s to 2.40 s" in str(spread) and "larger --repeat than 3" in str(spread)
    calm = CompareResult((CompareRow(run("cpu-single", (2.5, 2.6, 2.7)), 1.0, "reference"),))
    assert "noisy" not in str(calm)
    cold = dataclasses.replace(run("cpu-single", (0.9, 0.3)), cold=True)  # its first timed run was its first
    assert "noisy" not in str(CompareResult((CompareRow(cold, 1.0, "reference"),)))
