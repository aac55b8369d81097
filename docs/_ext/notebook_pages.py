"""The example notebooks as pages: ``examples/*.ipynb`` (run while the site builds) and ``examples/executed/*.ipynb``
(the stored runs on GPUs, shown as they ran) are copied under ``docs/notebooks/`` before Sphinx reads the sources.

A stored run's page begins with a note of the hardware, date and commit it ran on, from the notebook's
``gpu_magics_run`` metadata (``scripts/run_examples.py`` writes it); a stored run without it fails the build.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

from sphinx.application import Sphinx
from sphinx.environment import BuildEnvironment
from sphinx.errors import ExtensionError
from sphinx.util import logging

_log = logging.getLogger(__name__)

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
STORED = EXAMPLES / "executed"

# The tutorials: they run on a laptop without a GPU at their default size, while the site builds, each within its
# time limit (seconds; on 2 busy cores they take 5-35 s). One that needs longer fails the build: make it smaller, or
# show a stored run of it instead.
CPU_NOTEBOOKS = {"quickstart": 150, "first-steps": 150, "spmd-training": 240}
STAGE = "notebooks"  # docs/notebooks/<name>.ipynb, docs/notebooks/gpu/<name>.ipynb (not committed)
RUN_KEY = "gpu_magics_run"  # {"hardware": ..., "date": "YYYY-MM-DD", "commit": ..., "command": ...}


def as_run(source: str) -> str:
    """A cell's text less what a run of the examples changes: the size line's value, a comparison's backends."""
    if str(ROOT / "scripts") not in sys.path:
        sys.path.insert(0, str(ROOT / "scripts"))
    import run_examples

    source = run_examples.SIZE_LINE.sub(lambda found: f"{found['name']} = SIZE", source)
    source = re.sub(r"\s*\[set by run_examples\.py:[^\]]*\]", "", source)
    return re.sub(r"^(%%gpurun .*?)--compare(\s+|=)\S+", r"\1--compare BACKENDS", source, flags=re.M)


def changed_cells(name: str) -> list[int]:
    """The cells (0-based) of ``examples/NAME.ipynb`` that its stored run shows otherwise than they are now."""
    stored = json.loads((STORED / f"{name}.ipynb").read_text(encoding="utf-8"))["cells"]
    example = json.loads((EXAMPLES / f"{name}.ipynb").read_text(encoding="utf-8"))["cells"]
    texts = [[as_run("".join(cell["source"])) for cell in cells] for cells in (stored, example)]
    if len(stored) != len(example):
        return list(range(max(len(stored), len(example))))
    return [index for index, (then, now) in enumerate(zip(*texts, strict=True)) if then != now]


def run_note(name: str, run: dict[str, Any], changed: list[int] | None = None) -> str:
    """The note at the top of a stored run's page (``changed``: the cells the example has changed since)."""
    missing = [key for key in ("hardware", "date", "commit") if not run.get(key)]
    if missing:
        raise ExtensionError(
            f"examples/executed/{name}.ipynb: its metadata {RUN_KEY} lacks {', '.join(missing)} "
            "(scripts/run_examples.py writes it; add it where the run was made elsewhere)"
        )
    command = f" with `{run['command']}`" if run.get("command") else ""
    return (
        f":::{{note}}\nThis page shows a stored run of `examples/{name}.ipynb`, not run while this site was built: "
        f"it ran on **{run['hardware']}** on {run['date']} at commit `{run['commit']}`{command}. "
        f"The outputs below are that run's."
        + (
            f" The example has changed since in {len(changed)} cell{'s' if len(changed) > 1 else ''}: "
            f"[examples/{name}.ipynb](https://github.com/gpu-magics/gpu-magics/blob/main/examples/{name}.ipynb) "
            "shows them as they are now."
            if changed
            else ""
        )
        + "\n:::"
    )


def _write(path: Path, text: str) -> None:
    """Write ``text`` where it differs (an unchanged page keeps its time, so Sphinx does not read it again)."""
    if not path.exists() or path.read_text(encoding="utf-8") != text:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


def _page(notebook: dict[str, Any]) -> dict[str, Any]:
    """``notebook`` as a page: its cells with ids (nbformat 4.5), its code highlighted as IPython (magics, ``$x``)."""
    notebook["nbformat_minor"] = max(notebook.get("nbformat_minor", 0), 5)
    for number, cell in enumerate(notebook["cells"]):
        cell.setdefault("id", f"cell-{number}")
    notebook["metadata"].setdefault("language_info", {})["pygments_lexer"] = "ipython3"
    return notebook


def _cpu_page(path: Path) -> str:
    return json.dumps(_page(json.loads(path.read_text(encoding="utf-8"))), indent=1, ensure_ascii=False) + "\n"


def _stored_page(path: Path) -> str:
    """A stored run with its note below its title."""
    notebook = _page(json.loads(path.read_text(encoding="utf-8")))
    note = {
        "cell_type": "markdown",
        "id": "stored-run-note",
        "metadata": {},
        "source": run_note(path.stem, notebook["metadata"].get(RUN_KEY, {}), changed_cells(path.stem)),
    }
    cells = notebook["cells"]
    # The note goes below the notebook's title (its first heading), so the page keeps its title.
    at = 1 if cells and cells[0]["cell_type"] == "markdown" and "".join(cells[0]["source"]).startswith("#") else 0
    notebook["cells"] = [*cells[:at], note, *cells[at:]]
    return json.dumps(notebook, indent=1, ensure_ascii=False) + "\n"


def stage(docs: Path) -> list[Path]:
    """Copy the notebooks under ``docs/notebooks``; returns the pages written."""
    target = docs / STAGE
    pages = []
    for name in CPU_NOTEBOOKS:
        page = target / f"{name}.ipynb"
        _write(page, _cpu_page(EXAMPLES / f"{name}.ipynb"))
        pages.append(page)
    listed = []
    for path in sorted(STORED.glob("*.ipynb")):
        text = _stored_page(path)
        page = target / "gpu" / path.name
        _write(page, text)
        pages.append(page)
        listed.append(f"{path.stem}")
    index = (
        "# Runs on GPUs\n\n"
        "The example notebooks as they ran on GPUs at their full size, with their stored outputs; each page says on "
        "which hardware and date it ran. `python scripts/run_examples.py --full` makes such runs again.\n\n"
        "```{toctree}\n:maxdepth: 1\n\n" + "\n".join(listed) + "\n```\n"
    )
    _write(target / "gpu" / "index.md", index)
    for stale in (target / "gpu").glob("*.ipynb"):
        if stale not in pages:
            stale.unlink()
    return pages


def over_time(runtimes: dict[str, float | None]) -> list[str]:
    """The notebooks (by name) that ran longer than their limit, each in a line that says so."""
    return [
        f"notebooks/{name}.ipynb ran {runtime:.0f} s, over its limit of {CPU_NOTEBOOKS[name]} s "
        "(docs/_ext/notebook_pages.py): make it smaller or show a stored run of it"
        for name, runtime in runtimes.items()
        if runtime is not None and runtime > CPU_NOTEBOOKS[name]
    ]


def _on_config_inited(app: Sphinx, config: Any) -> None:
    stage(Path(app.srcdir))


def _on_env_updated(app: Sphinx, env: BuildEnvironment) -> None:
    """Each CPU notebook ran within its limit (the time of the run whose outputs the page shows)."""
    from myst_nb.sphinx_ import NbMetadataCollector

    runtimes = {}
    for name in CPU_NOTEBOOKS:
        data = NbMetadataCollector.get_exec_data(env, f"{STAGE}/{name}") if f"{STAGE}/{name}" in env.all_docs else None
        runtimes[name] = data.get("runtime") if data else None
    for line in over_time(runtimes):
        _log.warning(line)


def setup(app: Sphinx) -> dict[str, Any]:
    app.connect("config-inited", _on_config_inited)
    app.connect("env-updated", _on_env_updated)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
