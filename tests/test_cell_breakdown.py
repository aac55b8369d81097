"""``benchmarks/cell_breakdown.py`` on the CPU backends with a tiny workload: each cell's steps add up to its time
(within 10%), and every step a cell passes is found. No timings are asserted beyond that."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpu_magics.cluster.records import record as cluster_records

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.slow
def test_the_steps_of_each_cell_add_up_to_its_time(tmp_path: Path) -> None:
    found = tmp_path / "breakdown.json"
    env = {**os.environ, "GPU_MAGICS_SOURCE": "fake:0", cluster_records.RUNTIME_DIR_ENV: str(tmp_path)}
    command = [sys.executable, "benchmarks/cell_breakdown.py", "--cpu-workers", "1", "--n", "400", "--chunk", "100"]
    done = subprocess.run(
        [*command, "--repeat", "3", "--count", "20", "--json", str(found)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    cells = json.loads(found.read_text())["cells"]
    assert set(cells) == {
        "empty plain cell",
        "empty %%gpurun cpu-threads -q",
        "empty %%gpurun multi-gpu -q",
        "seed %%gpurun cpu-threads",
        "seed %%gpurun multi-gpu (one-worker %gpucluster)",
    }
    for name, cell in cells.items():
        # the steps' means over the middle runs add up to those runs' mean time (a busy machine skews the runs, so
        # the median of all of them may lie elsewhere): within 10%, or 0.15 ms on an empty cell (the clock reads)
        slack = max(0.1 * cell["middle_wall_ms"], 0.15)
        assert abs(cell["sum_of_steps_ms"] - cell["middle_wall_ms"]) <= slack, (name, cell)
        assert name in done.stdout
    for name in ("seed %%gpurun cpu-threads", "seed %%gpurun multi-gpu (one-worker %gpucluster)"):
        steps = cells[name]["steps_ms"]
        for step in (
            "magic: compile the cell",
            "monitor: start",
            "cell: its code, graph build and optimization",
            "submit: the graph to the scheduler, taken in",
            "scheduler: until the first task starts",
            "tasks: first start to last end",
            "gather: the result's way back",
            "summary, after the cell",
        ):
            assert step in steps, (name, step, steps)
    assert "tasks: first start to last end" not in cells["empty %%gpurun multi-gpu -q"]["steps_ms"]
