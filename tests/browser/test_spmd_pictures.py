"""The SPMD views the documentation shows, taken in real JupyterLab (tests/browser/spmd_pictures.mjs) at the
default sidebar width, light and dark: tqdm bars whose finished states stay in their rank's place, and a status
table whose quiet rank says where it waits on a line under its row. The pictures go to docs/_build/screenshots
(the docs build shows them)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from .conftest import REPO, Lab, run_browser_script

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.timeout(600)]

CELLS = [
    "%load_ext gpu_magics\n%gpucluster --cpu-workers 2 --name training\n%config GpuMagics.spmd_stall_s = 2.0",
    "%%gpurun spmd\n"
    "import os, time\n"
    "from tqdm import tqdm\n"
    "rank = int(os.environ['RANK'])\n"
    "for epoch in (1, 2):\n"
    "    for batch in tqdm(range(30), desc=f'epoch {epoch}'):\n"
    "        time.sleep(0.02 * (rank + 1))\n"
    "print(f'rank {rank}: 2 epochs done')",
    "%%gpurun spmd\n"
    "import time\n"
    "def wait_for_batch():\n"
    "    time.sleep(12 if rank == 0 else 0)  # rank 0's data is slow to come\n"
    "wait_for_batch()",
    "%gpucluster stop",
]


def notebook(path: Path) -> str:
    path.write_text(
        json.dumps(
            {
                "cells": [
                    {"cell_type": "code", "metadata": {}, "source": source, "outputs": [], "execution_count": None}
                    for source in CELLS
                ],
                "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}},
                "nbformat": 4,
                "nbformat_minor": 5,
            }
        ),
        "utf-8",
    )
    return path.name


@pytest.mark.skipif(importlib.util.find_spec("tqdm") is None, reason="tqdm is not installed (pip install tqdm)")
def test_the_spmd_pictures_show_bars_in_place_and_a_quiet_ranks_note(lab: Lab) -> None:
    # taken into docs/_build/screenshots, which git ignores: a test run leaves the committed pictures as they are
    pictures = [REPO / "docs" / "_build" / "screenshots" / f"{view}-{theme}.png"
                for view in ("spmd-progress", "spmd-status") for theme in ("light", "dark")]  # fmt: skip
    for picture in pictures:
        picture.unlink(missing_ok=True)
    result = run_browser_script(lab, "spmd_pictures.mjs", notebook(lab.root / "spmd_pictures.ipynb"))
    assert "every SPMD picture taken" in result.stdout
    assert [picture.name for picture in pictures if not picture.is_file()] == []
