"""The cells the documentation marks ``slurm`` run as printed on a real SLURM (``tests/slurm/setup.sh``), with the
page's other cells, in a fresh kernel; the queue is left as it was found (the ``queue`` fixture)."""

from __future__ import annotations

import pytest

from tests.test_doc_snippets import cells, execute, pages_with

pytestmark = [pytest.mark.slurm, pytest.mark.slow, pytest.mark.xdist_group("slurm")]


@pytest.mark.parametrize("page", pages_with("slurm"))
def test_a_page_s_slurm_cells_run_on_a_real_slurm(page: str, queue: None) -> None:
    text = execute(page, cells(page, "slurm"))
    assert "Traceback" not in text, text
