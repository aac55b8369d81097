"""The one number convention of the displays, shared with the side panel's ``format.ts``.

``tests/data/format_cases.json`` is read here and by ``labextension/test/helpers.spec.ts``: both sides must give
the same string for every case.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from gpu_magics.display import format as fmt

CASES: dict[str, Any] = json.loads((Path(__file__).parent / "data" / "format_cases.json").read_text("utf-8"))
GIB = 2**30


@pytest.mark.parametrize(("value", "expected"), CASES["bytes"])
def test_bytes_match_the_side_panel(value: int | None, expected: str) -> None:
    assert fmt.format_bytes(value) == expected


@pytest.mark.parametrize(("value", "expected"), CASES["percent"])
def test_percent_matches_the_side_panel(value: float | None, expected: str) -> None:
    assert fmt.format_percent(value) == expected


@pytest.mark.parametrize(("value", "unit", "expected"), CASES["number"])
def test_number_matches_the_side_panel(value: float | None, unit: str, expected: str) -> None:
    assert fmt.format_number(value, unit) == expected


@pytest.mark.parametrize(("seconds", "expected"), CASES["duration"])
def test_duration_matches_the_side_panel(seconds: float, expected: str) -> None:
    assert fmt.format_duration(seconds) == expected


def test_shared_cases_cover_every_unit_and_rounding_rule() -> None:
    units = {text.split()[-1] for _, text in CASES["bytes"] if " " in text}
    assert units == {"B", "KiB", "MiB", "GiB", "TiB"}
    assert [1280, "1.3 KiB"] in CASES["bytes"]  # an exact half rounds up, as JavaScript's toFixed does
    assert [2.5, "3%"] in CASES["percent"]  # as Math.round does, not Python's round-half-even


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (141 * GIB, "141 GiB"),  # one H200, as NVML reports it
        (140.4 * GIB, "140 GiB"),
        (3.2e9, "3.0 GiB"),  # 2.98 GiB
        (8.0, "8 B"),
        (8e6, "7.6 MiB"),
        (math.nan, fmt.DASH),
        (math.inf, fmt.DASH),
        (-math.inf, fmt.DASH),
    ],
)
def test_bytes_edge_cases(value: float, expected: str) -> None:
    assert fmt.format_bytes(value) == expected


def test_counts_percent_and_unknowns() -> None:
    assert fmt.format_count(1_000_000) == "1,000,000"
    assert fmt.format_count(math.nan) == fmt.format_count(None) == "?"
    assert fmt.format_percent(math.nan) == fmt.format_number(math.inf, "W") == fmt.DASH == "\u2013"


@pytest.mark.parametrize(
    ("seconds", "expected"),
    [
        (8.71e-5, "87.1 us"),
        (0.0124, "12.4 ms"),
        (0.5234, "523 ms"),
        (0.076, "76.0 ms"),  # three significant digits, as "54.2 ms" beside it
        (0.005, "5.00 ms"),
        (0.0099996, "10.0 ms"),
        (2e-6, "2.00 us"),
        (0.99996, "1.00 s"),  # never "1e+03 ms"
        (2.3111, "2.31 s"),
        (12.34, "12.3 s"),
        (125.4, "2 min 5 s"),
        (179.6, "3 min 0 s"),  # never "2 min 60 s"
        (3569, "59 min 29 s"),
        (3599.7, "1 h 0 min"),  # never "60 min 0 s"
        (3840, "1 h 4 min"),
        (None, fmt.DASH),
    ],
)
def test_seconds(seconds: float | None, expected: str) -> None:
    assert fmt.format_seconds(seconds) == expected


def test_one_style_for_every_display() -> None:
    assert "font-family:var(--jp-ui-font-family" in fmt.STYLE and "'" not in fmt.STYLE and '"' not in fmt.STYLE


@pytest.mark.parametrize(("seconds", "expected"), CASES["age"])
def test_age_matches_the_side_panel(seconds: float, expected: str) -> None:
    assert fmt.format_age(1_800_000_000.0 - seconds, 1_800_000_000.0) == expected


def test_tables_align_numbers_right_in_header_and_cells() -> None:
    lines = fmt.text_table(("name", "time"), [("a", "1.00 s"), ("long name", "12 ms")], numeric=(1,))
    assert lines == ["name         time", "a          1.00 s", "long name   12 ms"]
    html = fmt.html_table(("name", "time"), [("<b>a</b>", "1.00 s")], numeric=(1,), titles=("tip",))
    assert "<th style='text-align:right;padding:2px 8px;font-weight:600'>time</th>" in html
    assert "<td style='text-align:right;padding:2px 8px'>1.00 s</td>" in html
    assert "<th style='text-align:left;padding:2px 8px;font-weight:600'>name</th>" in html
    assert "<td style='text-align:left;padding:2px 8px' title='tip'><b>a</b></td>" in html


def test_style_uses_the_theme_type_scale() -> None:
    assert "var(--jp-ui-font-size1" in fmt.STYLE and "px;" not in fmt.STYLE.replace("13px)", ")")
    assert all(colour.startswith("var(--jp-") for colour in fmt.STATUS_COLOURS.values())
