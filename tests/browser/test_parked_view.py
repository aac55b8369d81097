"""A parked cluster in real JupyterLab in headless Chromium at the default sidebar width, light and dark: the card of
the notebook's cluster says since when it is parked and what it keeps in host memory, and the status bar adds
"· parked" for the notebook in front (its tooltip says what the next cell does). The pictures come from a record
written as a parked kernel writes it (9 GiB parked two minutes ago); then the card's Park parks the notebook's own
cluster for real and its Resume takes it back, through its kernel, each saying on the card what the kernel said.
Screenshots: ``test-artifacts/browser/parked-*.png``."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from .conftest import Lab, run_browser_script
from .test_panel_layout import local_gpu_facts

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.timeout(400)]

NOTEBOOK = "parked.ipynb"
# the notebook's own cluster, parked for real from its card: the server's simulated GPUs give it one worker each, and
# choose the driver's stand-in (``workers.checkpoint``)
CELLS = [
    "%load_ext gpu_magics\n%config ClusterMagics.wait_for_workers = True",
    "%gpucluster --name live",
    "import dask.array as da\nfrom distributed import wait\nx = da.arange(1000, chunks=100).persist()\nwait(x);",
]
PARKED_NOTEBOOK = {
    "cells": [
        {"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [], "source": source}
        for source in CELLS
    ],
    "metadata": {"kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"}},
    "nbformat": 4,
    "nbformat_minor": 5,
}


@pytest.fixture
def lab(tmp_path: Path, requirements: None) -> Iterator[Lab]:
    server = Lab(tmp_path)
    server.env["GPU_MAGICS_SOURCE"] = "fake:2"
    (server.root / NOTEBOOK).write_text(json.dumps(PARKED_NOTEBOOK), encoding="utf-8")
    try:
        server.start()
        yield server
    finally:
        server.close()


def test_a_parked_cluster_on_its_card_and_in_the_status_bar(lab: Lab) -> None:
    lab.runtime.mkdir(parents=True, exist_ok=True, mode=0o700)
    facts = json.dumps(local_gpu_facts())
    result = run_browser_script(lab, "parked_view.mjs", NOTEBOOK, str(lab.runtime), facts)
    assert "the parked cluster reads right" in result.stdout
