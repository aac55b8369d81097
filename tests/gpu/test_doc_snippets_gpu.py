"""The cells the documentation marks ``gpu`` run as printed on GPUs: each page's cells in order in a fresh kernel,
its GPU cells in place of their CPU-only alternatives (``tests/doc_snippets.py`` has the markers)."""

from __future__ import annotations

import pytest

from tests.doc_snippets import all_blocks
from tests.gpu.conftest import GPU_COUNT
from tests.test_doc_snippets import cells, execute, pages_with


def gpus_needed(page: str) -> int:
    """The most GPUs a cell of the page asks for (``gpu 2``), at least one."""
    counts = [int((block.tag("gpu") or ["1"])[0]) for block in all_blocks() if block.page == page]
    return max([1, *counts])


@pytest.mark.parametrize("page", pages_with("gpu"))
def test_a_page_s_gpu_cells_run_as_printed(page: str) -> None:
    if gpus_needed(page) > GPU_COUNT:
        pytest.skip(f"{page} needs {gpus_needed(page)} GPUs; this machine has {GPU_COUNT}")
    text = execute(page, cells(page, "gpu"))
    assert "Traceback" not in text, text
