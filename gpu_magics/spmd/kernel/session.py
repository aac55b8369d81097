"""``%gpurun spmd`` as a line: every following plain cell runs as a ``%%gpurun spmd`` cell (with the line's
options), until ``%gpurun off``. A cell that begins with a magic (``%``) or a shell command (``!``) runs in the
kernel as usual, so ``%gpurun off`` and ``%gpucluster`` keep working.

Done with an IPython input transformer (the cleanup stage, before cell magics are recognized): the cell gains a
``%%gpurun spmd ...`` first line, so it runs, shows and fails exactly as that cell would.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

from IPython.core.interactiveshell import InteractiveShell

_KEY = "_gpu_magics_spmd_session"


class SpmdSession:
    def __init__(self, shell: InteractiveShell, options: str) -> None:
        self.shell = shell
        self.options = options.strip()
        self.transform: Callable[[list[str]], list[str]] = self._transform

    def _transform(self, lines: list[str]) -> list[str]:
        first = next((line.strip() for line in lines if line.strip()), "")
        if not first or first.startswith(("%", "!")):
            return lines
        return [f"%%gpurun spmd -q {self.options}".rstrip() + "\n", *lines]


def current(shell: InteractiveShell) -> SpmdSession | None:
    found = getattr(shell, _KEY, None)
    return found if isinstance(found, SpmdSession) else None


def start(shell: InteractiveShell, options: str) -> SpmdSession:
    """Make plain cells SPMD cells (replacing an SPMD session already on)."""
    end(shell)
    made = SpmdSession(shell, options)
    setattr(shell, _KEY, made)
    shell.input_transformers_cleanup.append(made.transform)
    return made


def end(shell: InteractiveShell) -> SpmdSession | None:
    """Plain cells run in the kernel again; the session that ended, if any."""
    made = current(shell)
    if made is None:
        return None
    with contextlib.suppress(ValueError):
        shell.input_transformers_cleanup.remove(made.transform)
    delattr(shell, _KEY)
    return made
