"""A parked cluster in real JupyterLab in headless Chromium at the default sidebar width, light and dark: the card of
the notebook's cluster says since when it is parked and what it keeps in host memory, and the status bar adds
"· parked" for the notebook in front (its tooltip says what the next cell does). The cluster's record is written as
a parked kernel writes it, for the kernel of the notebook the browser opened. Screenshots:
``test-artifacts/browser/parked-*.png``."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from .conftest import Lab, run_browser_script
from .test_panel_layout import local_gpu_facts

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.timeout(400)]

NOTEBOOK = "parked.ipynb"
EMPTY_NOTEBOOK = {
    "cells": [{"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [], "source": "x = 1"}],
    "metadata": {"kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"}},
    "nbformat": 4,
    "nbformat_minor": 5,
}


@pytest.fixture
def lab(tmp_path: Path, requirements: None) -> Iterator[Lab]:
    server = Lab(tmp_path)
    server.env["GPU_MAGICS_SOURCE"] = "fake:2"
    (server.root / NOTEBOOK).write_text(json.dumps(EMPTY_NOTEBOOK), encoding="utf-8")
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
