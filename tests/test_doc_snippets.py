"""Every notebook cell and shell command the README and the documentation pages show runs as printed.

The cells of each page run in order in one fresh kernel (nbclient, as ``scripts/run_examples.py`` runs the
examples), on a 2-worker CPU cluster where a page starts one; cells marked ``gpu`` run in ``tests/gpu/``; cells that
need a library run where it is installed; shell commands marked ``run`` run in the repository root. Every other block
says, in its marker, why it is not run here (``tests/doc_snippets.py`` has the conventions)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.doc_snippets import ROOT, Block, all_blocks

BLOCKS = all_blocks()
KNOWN_TAGS = {"skip", "gpu", "cpu", "slurm", "gateway", "needs", "config", "run"}
ELSEWHERE = ("gpu", "slurm", "gateway")  # cells that need what this machine may lack


def cells(page: str, where: str | None = None) -> list[Block]:
    """The cells of a page that run here, in order, with those marked ``where`` (``gpu``, ``slurm``, ``gateway``):
    not skipped, not a configuration file, their modules installed; where the GPU cells run, the CPU-only
    alternatives to them (marked ``cpu``) are left out."""
    return [
        block
        for block in BLOCKS
        if block.page == page and block.kind == "cell" and block.skipped is None and block.tag("config") is None
        and not block.missing and all(block.tag(tag) is None or tag == where for tag in ELSEWHERE)
        and not (where == "gpu" and block.tag("cpu") is not None)
    ]  # fmt: skip


def cpu_cells(page: str) -> list[Block]:
    return cells(page)


def pages_with(tag: str) -> list[str]:
    return sorted({block.page for block in BLOCKS if block.kind == "cell" and block.tag(tag) is not None})


CELL_PAGES = sorted({block.page for block in BLOCKS if block.kind == "cell"})
RUN_PAGES = [page for page in CELL_PAGES if cpu_cells(page)]


def test_the_pages_show_cells_and_commands() -> None:
    assert len([block for block in BLOCKS if block.kind == "cell"]) > 30
    assert "docs/how-to/spmd-libraries.md" in RUN_PAGES and "README.md" in RUN_PAGES


def test_every_marker_is_known_and_every_skip_says_why() -> None:
    for block in BLOCKS:
        for marker in block.tags:
            assert marker.split()[0] in KNOWN_TAGS, f"{block.where}: unknown marker {marker!r}"
        if block.skipped is not None:
            assert len(block.skipped.split()) >= 3, f"{block.where}: a skip says why it is not run"


@pytest.mark.parametrize("block", [b for b in BLOCKS if b.kind == "bash"], ids=lambda b: b.where)
def test_every_shell_command_is_run_or_says_why_not(block: Block) -> None:
    assert block.tag("run") is not None or block.skipped, f"{block.where}: mark the block run or skip REASON"


def execute(page: str, cells: list[Block]) -> str:
    """Run ``cells`` in order in a fresh kernel; the outputs' text. A failing cell fails with its traceback."""
    pytest.importorskip("nbclient")
    from nbformat.v4 import new_code_cell, new_notebook

    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import run_examples
    finally:
        sys.path.remove(str(ROOT / "scripts"))
    nb = new_notebook(cells=[new_code_cell(cell.body.rstrip("\n")) for cell in cells])
    run_examples.execute(nb, timeout=900)
    return run_examples.outputs_text(nb)


@pytest.mark.slow
@pytest.mark.timeout(1800)  # the first DeepSpeed use on CPU ranks compiles its op (docs/how-to/spmd-libraries.md)
@pytest.mark.parametrize("page", RUN_PAGES)
def test_a_page_s_cells_run_as_printed_in_a_fresh_notebook(page: str) -> None:
    text = execute(page, cpu_cells(page))
    assert "Traceback" not in text, text


@pytest.mark.slow
@pytest.mark.parametrize("page", pages_with("gateway"))
def test_a_page_s_gateway_cells_run_against_a_real_gateway(
    page: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("dask_gateway_server", reason="needs dask-gateway-server (the test extra)")
    from tests.gateway_server import gateway_server

    with gateway_server(tmp_path / "gateway") as server:
        for key, value in server.env().items():  # the kernel's dask config names the gateway, as a hub's does
            monkeypatch.setenv(key, value)
        text = execute(page, cells(page, "gateway"))
    assert "Traceback" not in text, text


@pytest.mark.parametrize("block", [b for b in BLOCKS if b.tag("config") is not None], ids=lambda b: b.where)
def test_a_configuration_snippet_sets_settings_that_exist(block: Block) -> None:
    from traitlets.config import Config

    from gpu_magics.server.config import GpuMagicsServer

    c = Config()
    exec(compile(block.body, block.where, "exec"), {"c": c})
    for section, values in c.items():
        if section == "GpuMagicsServer":
            assert set(values) <= set(GpuMagicsServer.class_trait_names(config=True)), block.where


@pytest.mark.slow
@pytest.mark.parametrize("block", [b for b in BLOCKS if b.tag("run") is not None], ids=lambda b: b.where)
def test_a_shell_command_marked_run_runs(block: Block) -> None:
    env_bin = str(Path(sys.executable).parent)
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", f'export PATH="{env_bin}:$PATH"\n{block.body}'],
        cwd=ROOT, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
