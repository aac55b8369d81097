"""Pure SVG and text helpers: aggregation, bounded size, escaping, layout."""

from __future__ import annotations

import math
import xml.etree.ElementTree as ET

import pytest

from gpu_magics.display import svg


def test_format_shape() -> None:  # bytes and counts: test_display_format.py
    assert svg.format_shape((10, math.nan)) == "(10, ?)"
    assert svg.format_shape((5,)) == "(5,)"


def test_axis_lines_every_boundary_when_few() -> None:
    lines = svg.axis_lines((2, 2, 4))
    assert lines.positions == (0.0, 0.25, 0.5, 1.0)
    assert lines.step == 1 and lines.known


def test_axis_lines_aggregate_many_chunks() -> None:
    lines = svg.axis_lines((1,) * 1_000_000, max_lines=64)
    assert len(lines.positions) <= 65
    assert lines.positions[0] == 0.0 and lines.positions[-1] == pytest.approx(1.0)
    assert lines.step == 15_625
    assert "a line every 15,625 chunks" in lines.title


def test_axis_lines_unknown_sizes_are_even_and_dashed() -> None:
    lines = svg.axis_lines((math.nan, math.nan))
    assert not lines.known and lines.positions == (0.0, 0.5, 1.0)
    drawing = svg.chunk_grid(((math.nan, math.nan), (5, 5)))
    assert "stroke-dasharray" in drawing
    ET.fromstring(drawing)


@pytest.mark.parametrize("ndim", [0, 1, 2, 3, 4])
def test_chunk_grid_is_valid_bounded_svg(ndim: int) -> None:
    chunks = tuple((1,) * 1000 for _ in range(ndim))
    drawing = svg.chunk_grid(chunks, "cupy")
    root = ET.fromstring(drawing)
    assert root.tag.endswith("svg")
    assert float(root.attrib["width"]) < 400 and float(root.attrib["height"]) < 400
    assert len(drawing) < 20_000
    assert svg.COLOURS["cupy"][0] in drawing


def test_chunk_grid_colours_by_chunk_library() -> None:
    assert svg.COLOURS["numpy"][0] in svg.chunk_grid(((5, 5),), "numpy")
    assert svg.COLOURS["other"][0] in svg.chunk_grid(((5, 5),), "sparse")


def test_escape_and_dag_escapes_names() -> None:
    node = svg.DagNode("<script>alert(1)</script>", "1 task", "<b>", "numpy", 1.0)
    drawing = svg.layered_dag([node], [])
    assert "<script>" not in drawing and "&lt;script&gt;" in drawing
    ET.fromstring(drawing)


def test_dag_levels_and_width_bound() -> None:
    assert svg.dag_levels(4, [(0, 1), (1, 2), (0, 2), (3, 2)]) == [0, 1, 2, 0]
    nodes = [svg.DagNode(f"n{i}", "", "") for i in range(60)]
    drawing = svg.layered_dag(nodes, [])
    root = ET.fromstring(drawing)
    assert float(root.attrib["width"]) <= svg.MAX_WIDTH


def test_long_box_labels_keep_their_number_and_fit() -> None:
    assert svg.shorten_name("mean_combine-partial-aggregate ×7", 26) == "mean_combine-partial-a… ×7"
    assert svg.shorten_name("add #2", 26) == "add #2"
    assert svg.shorten_name("a" * 30, 26) == "a" * 25 + "…"
    drawing = svg.layered_dag([svg.DagNode(label="mean_combine-partial #12", detail="", title="")], [])
    assert ">mean_combine-partial #12<" in drawing and 'textLength="140"' in drawing
