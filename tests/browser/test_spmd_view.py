"""SPMD cells as JupyterLab shows them (tests/browser/spmd_view.mjs): the status rows, merged output and a failing
rank, light and dark."""

from __future__ import annotations

import pytest

from .conftest import Lab, run_notebook_script

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.timeout(600)]


def test_spmd_cells_render(lab: Lab) -> None:
    result = run_notebook_script(lab, "spmd_view.mjs", "spmd_view.ipynb")
    assert "every SPMD view rendered" in result.stdout
