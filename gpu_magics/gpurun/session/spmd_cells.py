"""``%gpurun spmd`` as a line: every following plain cell runs as a ``%%gpurun spmd`` cell (with the line's
options), until ``%gpurun off``. A cell that begins with a magic (``%``) or a shell command (``!``) runs in the
kernel as usual, so ``%gpurun off`` and ``%gpucluster`` keep working.

Done with an IPython input transformer (the cleanup stage, before cell magics are recognized): the cell gains a
``%%gpurun spmd ...`` first line, so it runs, shows and fails exactly as that cell would. One of the states of the
plain-cell session (``plain_cells.Session.now``), which installs and removes the transformer.
"""

from __future__ import annotations

OFF_HINT = "%gpurun off runs plain cells in this kernel again"


class SpmdCells:
    """Plain cells as SPMD cells, with the options of the ``%gpurun spmd`` line."""

    def __init__(self, options: str) -> None:
        self.options = options.strip()

    @property
    def line(self) -> str:
        """The ``%%gpurun`` line each plain cell gains (without ``%%gpurun``)."""
        return f"spmd -q {self.options}".rstrip()

    def made(self, line: str) -> bool:
        """Whether ``line`` (a ``%%gpurun`` cell's) is the one this gave a plain cell."""
        return line.strip() == self.line

    def transform(self, lines: list[str]) -> list[str]:
        first = next((line.strip() for line in lines if line.strip()), "")
        if not first or first.startswith(("%", "!")):
            return lines
        return [f"%%gpurun {self.line}\n", *lines]
