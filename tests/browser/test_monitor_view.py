"""``%gpumonitor`` in real JupyterLab in headless Chromium, in a 1400 px window with the left sidebar open: with 2
and with 4 (simulated) GPUs, light and dark, no value of the live panel wraps and nothing overflows; a busy
``%%gpurun`` cell's host-CPU chart has its line, and a summary on GPUs reads on one line per GPU.
Screenshots: ``test-artifacts/browser/monitor-*.png``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from .conftest import Lab, run_browser_script

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.timeout(600)]

BUSY = "%%gpurun cpu-threads\nsum(i * i for i in range(3_000_000))"
GPU_SUMMARY = """import time
from gpu_magics.gpurun.live.cell_monitor import figures_from
from gpu_magics.monitor.sampler import Sampler
from gpu_magics.monitor.sources import make_source

sampler = Sampler(make_source("fake", gpus={gpus}))
snapshots = []
for _ in range(12):
    snapshots.append(sampler.tick())
    time.sleep(0.05)
figures_from(snapshots, "gpu", snapshots[0].time)"""


def notebook(path: Path, gpus: int) -> str:
    """A notebook that shows the live panel on ``gpus`` simulated GPUs and a ``%%gpurun`` summary."""
    cells = [
        f"import os\nos.environ['GPU_MAGICS_SOURCE'] = 'fake:{gpus}'\n%load_ext gpu_magics",
        "%gpumonitor --interval 0.25",
        BUSY,
        GPU_SUMMARY.format(gpus=gpus),  # a cell's summary on GPUs, as a %%gpurun cell on them shows it
    ]
    path.write_text(
        json.dumps(
            {
                "cells": [
                    {"cell_type": "code", "metadata": {}, "source": source, "outputs": [], "execution_count": None}
                    for source in cells
                ],
                "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}},
                "nbformat": 4,
                "nbformat_minor": 5,
            }
        ),
        "utf-8",
    )
    return path.name


def test_the_live_panel_reads_on_one_line_per_gpu(lab: Lab) -> None:
    names = [notebook(lab.root / f"gpus-{gpus}.ipynb", gpus) for gpus in (2, 4)]
    result = run_browser_script(lab, "monitor_view.mjs", *names)
    assert "every panel reads on one line per GPU" in result.stdout
    assert "4 GPU rows" in result.stdout and "2 GPU rows" in result.stdout
