"""The rich displays (arrays, graph summaries, widget mode, the magics' outputs) render in real JupyterLab in
headless Chromium, light and dark, and the saved notebook shows them without a kernel, in JupyterLab after a
reload and in an HTML export."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import HERE, REPO, Lab, run_notebook_script

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.timeout(600)]


def test_displays_render(lab: Lab) -> None:
    result = run_notebook_script(lab, "displays.mjs", "displays.ipynb")
    assert "all displays rendered" in result.stdout
    check_saved_notebook(lab.root / "displays.ipynb")


def check_saved_notebook(path: Path) -> None:
    """The saved outputs of the magics need no widget model and none is empty; the HTML export shows them."""
    cells = [c for c in json.loads(path.read_text("utf-8"))["cells"] if c["cell_type"] == "code"]
    magics = [c for c in cells if "".join(c["source"]).startswith(("%%gpurun", "%gpumonitor"))]
    assert len(magics) == 4
    for cell in magics:
        for output in cell["outputs"]:
            data = output.get("data", {})
            assert "application/vnd.jupyter.widget-view+json" not in data, cell["source"]
            if output["output_type"] == "display_data":
                assert "".join(data.get("text/plain", "")).strip(), f"an empty output under {cell['source'][0]!r}"
    exported = subprocess.run(
        [sys.executable, "-m", "nbconvert", "--to", "html", "--stdout", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert exported.returncode == 0, exported.stderr
    page = exported.stdout
    export = REPO / "test-artifacts" / "browser" / "displays-export.html"
    export.write_text(page, "utf-8")
    for marker in ("gpu-magics-run", "gpu-magics-compare", "gpu-magics-cluster", "gpu-magics-monitor", "stopped"):
        assert marker in page, marker
    shown = subprocess.run(
        ["node", str(HERE / "export_view.mjs"), str(export)],
        env={**os.environ, "ARTIFACTS": str(export.parent)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert shown.returncode == 0, shown.stdout + shown.stderr
