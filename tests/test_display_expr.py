"""Displays of array expressions (``array.query-planning``), in a fresh process: dask reads that setting once."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
from typing import Any

import pytest

SCRIPT = r"""
import json
import dask, dask.array as da, numpy as np
from gpu_magics.display import ArrayView, graph_summary
from gpu_magics.display.objects import array_view
assert da.array_expr_enabled()
array_view.set_gpu_memory_probe(lambda: (80 * 2**30,))
calls = []
def record(block):
    calls.append(1)
    return block
x = da.random.random((2000, 2000), chunks=(200, 200))
y = (x.map_blocks(record, meta=np.empty((0, 0))) + x.T).mean()
view = ArrayView(x)
summary = graph_summary(y)
big = ArrayView(da.ones((1_000_000, 1_000_000), chunks=(1000, 1000)))
named = ArrayView(da.from_array(np.ones((4, 4)), chunks=2, name="<script>x</script>"))
print(json.dumps({
    "text": view.text(), "html": view.html(), "expression": view.info.expression,
    "summary": summary.text(), "summary_html": summary.html(), "tasks": summary.tasks,
    "graph_len": len(y.__dask_graph__()), "optimized": summary.tasks_optimized,
    "big": big.text(), "big_html_len": len(big.html()), "named": named.html(), "calls": len(calls),
}))
"""


@pytest.fixture(scope="module")
def out() -> dict[str, Any]:
    root = pathlib.Path(__file__).resolve().parents[1]
    env = {**os.environ, "DASK_ARRAY__QUERY_PLANNING": "True", "PYTHONPATH": str(root)}
    done = subprocess.run([sys.executable, "-c", SCRIPT], env=env, cwd=root, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def test_array_expression_display(out: dict[str, Any]) -> None:
    assert out["expression"]
    assert "shape=(2000, 2000)" in out["text"] and "10 × 10 = 100" in out["text"]
    assert "expression node" in out["text"] and "fits in one GPU (80.0 GiB)" in out["text"]
    assert "<svg" in out["html"]


def test_expression_graph_summary(out: dict[str, Any]) -> None:
    assert out["tasks"] == out["graph_len"]
    assert "random_sample" in out["summary"] and "expression node" in out["summary"]
    assert out["optimized"] is not None
    assert out["calls"] == 0


def test_big_and_escaped(out: dict[str, Any]) -> None:
    assert "1,000 × 1,000 = 1,000,000" in out["big"] and out["big_html_len"] < 20_000
    assert "<script>" not in out["named"]
