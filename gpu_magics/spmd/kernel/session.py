"""``%gpurun spmd`` as a line: every following plain cell runs as a ``%%gpurun spmd`` cell (with the line's
options), until ``%gpurun off``. A cell that begins with a magic (``%``) or a shell command (``!``) runs in the
kernel as usual, so ``%gpurun off`` and ``%gpucluster`` keep working.

Done with an IPython input transformer (the cleanup stage, before cell magics are recognized): the cell gains a
``%%gpurun spmd ...`` first line, so it runs, shows and fails exactly as that cell would.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence

from IPython.core.interactiveshell import InteractiveShell

_KEY = "_gpu_magics_spmd_session"


class SpmdSession:
    def __init__(self, shell: InteractiveShell, options: str) -> None:
        self.shell = shell
        self.options = options.strip()
        self.transform: Callable[[list[str]], list[str]] = self._transform

    @property
    def line(self) -> str:
        """The ``%%gpurun`` line each plain cell gains (without ``%%gpurun``)."""
        return f"spmd -q {self.options}".rstrip()

    def _transform(self, lines: list[str]) -> list[str]:
        first = next((line.strip() for line in lines if line.strip()), "")
        if not first or first.startswith(("%", "!")):
            return lines
        return [f"%%gpurun {self.line}\n", *lines]


OFF_HINT = "%gpurun off runs plain cells in this kernel again"


def made_line(shell: InteractiveShell, line: str) -> bool:
    """Whether ``line`` (a ``%%gpurun`` cell's) is the one the SPMD session gave a plain cell."""
    made = current(shell)
    return made is not None and line.strip() == made.line


def where(ranks: Sequence[int] | None, shown: Sequence[int] | None = None) -> str:
    """Where the session's cells run, in words (``every rank (2 ranks on 1 host (CPU))``, ``rank 1 of 2``); a
    one-line ``UsageError`` for ``--ranks`` or ``--output`` (``shown``) outside the world, where the world is
    known now."""
    from gpu_magics.spmd.kernel.output import rank_list
    from gpu_magics.spmd.kernel.ranks import world_now
    from gpu_magics.spmd.kernel.world import check_ranks

    found = world_now()
    if found is not None and shown is not None:
        check_ranks(shown, found[0], "%gpurun spmd --output", found[1])
    if ranks is None:
        return f"every rank ({found[1] if found else 'one per worker of the cluster'})"
    if found is not None:
        check_ranks(ranks, found[0], "%gpurun spmd --ranks", found[1])
    named = f"rank{'s' * (len(ranks) != 1)} {rank_list(ranks)}"
    return named + (f" of {found[0]}" if found else "")


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
