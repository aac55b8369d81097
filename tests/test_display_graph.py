"""Task-graph summaries and the %gpugraph magic."""

from __future__ import annotations

import itertools
import xml.etree.ElementTree as ET
from typing import Any

import dask
import dask.array as da
import numpy as np
import pytest
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell

from gpu_magics.display import graph_view
from gpu_magics.display.graph_view import LayerInfo, graph_summary
from gpu_magics.display.objects import graph_groups
from gpu_magics.display.objects.graph_groups import group_layers


def seed(n: int, chunk: int) -> Any:
    x = da.random.random((n, n), chunks=(chunk, chunk))
    return (x + x.T).mean()


def test_small_graph_exact() -> None:
    y = seed(2000, 200)  # ~400 tasks
    summary = graph_summary(y)
    assert summary.tasks == len(y.dask)
    assert [la.op for la in summary.layers][:3] == ["random_sample", "transpose", "add"]
    assert summary.optimized_exact
    (optimized,) = dask.optimize(y)
    assert summary.tasks_optimized == len(optimized.__dask_graph__())
    text = summary.text()
    assert f"{summary.tasks:,} tasks in 8 layers" in text and "after optimization" in text
    assert "random_sample" in text and "30.5 MiB" in summary.html()  # a 2000 x 2000 float64 layer: 32e6 bytes
    ET.fromstring(summary.to_svg())


def test_bytes_per_layer() -> None:
    x = da.ones((1000, 1000), chunks=100)
    summary = graph_summary(x + 1)
    assert {la.op: la.nbytes for la in summary.layers} == {"ones_like": 8e6, "add": 8e6}


def test_large_graph_is_fast_and_bounded() -> None:
    y = seed(60_000, 300)  # ~170,000 tasks
    summary = graph_summary(y)
    assert summary.tasks > 100_000
    assert summary.tasks_optimized is not None and summary.tasks_optimized < summary.tasks
    assert not summary.optimized_exact and "blockwise fusion" in summary.headline()
    assert len(summary.html()) < 40_000


def test_never_computes() -> None:
    calls: list[int] = []

    def record(block: np.ndarray) -> np.ndarray:
        calls.append(1)
        return block

    y = da.ones((100, 100), chunks=10).map_blocks(record, meta=np.empty((0, 0)))
    graph_summary(y.sum()).html()
    assert calls == []


def test_names_are_escaped() -> None:
    x = da.ones((4, 4), chunks=2)
    y = x.map_blocks(lambda b: b, name="<script>alert(1)</script>", meta=np.empty((0, 0)))
    html = graph_summary(y).html()
    assert "<script>" not in html and "&lt;script&gt;" in html


def test_chain_of_same_op_collapses() -> None:
    x = da.ones((10, 10), chunks=5)
    for _ in range(100):
        x = x + 1
    groups = graph_groups.group_layers(graph_summary(x).layers)
    assert [g.label for g in groups] == ["ones_like", "add ×100"]


def test_many_distinct_layers_collapse_to_bounded_dag() -> None:
    x = da.ones((10, 10), chunks=5)
    for i in range(150):
        x = x.map_blocks(lambda b: b, name=f"step{i}", meta=np.empty((0, 0)))
    summary = graph_summary(x)
    groups = summary.groups()
    assert len(groups) <= graph_groups.MAX_NODES
    assert sum(g.tasks for g in groups) == summary.tasks
    root = ET.fromstring(summary.to_svg())
    assert float(root.attrib["width"]) <= 760
    assert len(summary.html()) < 60_000


def test_group_by_op_and_level_keeps_a_dag() -> None:
    layers = [LayerInfo("src", "src", 1, None, None, ())]
    layers += [LayerInfo(f"op{i}-{j}", f"op{i}", 2, 16.0, "numpy.ndarray", ("src",)) for i in range(70) for j in (0,)]
    groups = group_layers(layers, limit=60)
    assert len(groups) <= 60
    assert sum(g.tasks for g in groups) == 141
    for i, g in enumerate(groups):
        assert all(d < i for d in g.dependencies)


def test_not_a_collection() -> None:
    with pytest.raises(TypeError, match="not a dask collection"):
        graph_summary([1, 2])


def test_delayed() -> None:
    @dask.delayed
    def inc(v: int) -> int:
        return v + 1

    summary = graph_summary(inc(inc(1)))
    assert summary.tasks == 2 and "inc" in summary.text()


def test_magic(ip: InteractiveShell) -> None:
    ip.run_cell("import dask.array as da\nt_x = da.ones((1000, 1000), chunks=100)")
    result = ip.run_line_magic("gpugraph", "(t_x + t_x.T).sum()")
    assert isinstance(result, graph_view.GraphSummary)
    assert "transpose" in result.text()
    data, _ = ip.display_formatter.format(result)
    assert "<svg" in data["text/html"] and "Task graph of" in data["text/plain"]


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("", "needs an expression"),
        ("t_missing.sum()", "name 't_missing' is not defined"),
        ("t_x +", "invalid expression"),
        ("t_list", "is a builtins.list, not a dask collection"),
    ],
)
def test_magic_usage_errors(ip: InteractiveShell, line: str, message: str) -> None:
    ip.user_ns["t_list"] = [1, 2]
    ip.user_ns["t_x"] = da.ones(3)
    with pytest.raises(UsageError, match=message):
        ip.run_line_magic("gpugraph", line)


def test_magic_help(ip: InteractiveShell) -> None:
    doc = ip.find_line_magic("gpugraph").__doc__ or ""
    assert "%gpugraph EXPR" in doc


def _path_points(d: str) -> list[tuple[str, float, float]]:
    """A path's on-curve points, each with the command that reaches it (control points dropped)."""
    import re

    points: list[tuple[str, float, float]] = []
    for command, numbers in re.findall(r"([MCL])([^MCL]*)", d):
        values = [float(v) for v in numbers.split()]
        points.append((command, values[-2], values[-1]))
    return points


def test_edges_go_around_boxes() -> None:
    from gpu_magics.display import svg

    # a -> b -> c -> d, and a -> d, a -> c: the long edges skip the boxes in between
    nodes = [svg.DagNode(label=n, detail="", title=n) for n in "abcd"]
    drawing = svg.layered_dag(nodes, [(0, 1), (1, 2), (2, 3), (0, 3), (0, 2)])
    root = ET.fromstring(drawing)
    ns = "{http://www.w3.org/2000/svg}"
    boxes = [
        (float(r.attrib["x"]), float(r.attrib["y"]), float(r.attrib["width"]), float(r.attrib["height"]))
        for r in root.iter(f"{ns}rect")
        if r.attrib.get("width") == str(svg.BOX_W)
    ]
    assert len(boxes) == 4
    paths = [p.attrib["d"] for p in root.iter(f"{ns}path") if "marker-end" in p.attrib]
    assert len(paths) == 5
    passes = 0
    for d in paths:
        points = _path_points(d)
        for (_, x0, y0), (command, x1, y1) in itertools.pairwise(points):
            if command == "C":  # a curve only crosses the gap between two levels
                assert 0 < y1 - y0 <= svg.GAP_Y + 0.01
            else:  # a straight run down a level, beside every box of it
                passes += 1
                assert x0 == x1
                for bx, by, bw, bh in boxes:
                    if by < y1 and y0 < by + bh:
                        assert not bx <= x0 <= bx + bw, (d, (bx, by))
    assert passes == 3  # a -> d passes two levels, a -> c one


def test_repeated_names_are_numbered() -> None:
    layers = [
        LayerInfo("src", "random_sample", 4, 64.0, "numpy.ndarray", ()),
        LayerInfo("add-1", "add", 4, 64.0, "numpy.ndarray", ("src",)),
        LayerInfo("transpose", "transpose", 4, 64.0, "numpy.ndarray", ("src",)),
        LayerInfo("add-2", "add", 4, 64.0, "numpy.ndarray", ("transpose",)),
        LayerInfo("sub", "sub", 4, 64.0, "numpy.ndarray", ("add-1", "add-2")),
    ]
    groups = group_layers(layers)
    assert [g.label for g in groups] == ["random_sample", "add #1", "transpose", "add #2", "sub"]
    summary = graph_view.GraphSummary("x", tuple(layers), None, False, False)
    text = summary.text()
    assert "add #1, add #2" in text  # what sub depends on, told apart
    assert "add #2" in summary.to_svg()


def test_plain_chains_collapse_in_bigger_graphs() -> None:
    layers = [LayerInfo("src", "ones", 4, 64.0, "numpy.ndarray", ())]
    previous = "src"
    for i in range(30):
        op = "mul" if i % 2 == 0 else "add"
        layers.append(LayerInfo(f"{op}-{i}", op, 4, 64.0, "numpy.ndarray", (previous,)))
        previous = f"{op}-{i}"
    layers.append(LayerInfo("other", "transpose", 4, 64.0, "numpy.ndarray", ("src",)))
    layers.append(LayerInfo("sum", "sum", 1, 8.0, "numpy.ndarray", (previous, "other")))
    labels = [g.label for g in group_layers(layers)]
    assert labels == ["ones", "mul ×15, add ×15", "transpose", "sum"]
    small = group_layers(layers[:4])  # a small graph shows every layer
    assert [g.label for g in small] == ["ones", "mul #1", "add", "mul #2"]


def test_a_middling_graph_keeps_chains_of_different_operations() -> None:
    layers = [LayerInfo("src", "ones", 4, 64.0, "numpy.ndarray", ())]
    for name, dependency in [("a", "src"), ("b", "src"), ("c", "a"), ("d", "b"), ("e", "c"), ("f", "d")]:
        layers.append(LayerInfo(name, f"op_{name}", 4, 64.0, "numpy.ndarray", (dependency,)))
    layers.append(LayerInfo("g", "join", 4, 64.0, "numpy.ndarray", ("e", "f")))
    layers.append(LayerInfo("h", "sum", 1, 8.0, "numpy.ndarray", ("g",)))
    assert len(group_layers(layers)) == 9  # over DETAILED layers, but no chain of one operation to fold
