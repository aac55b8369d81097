"""What an interrupt shows, in the kernel: the user's own lines and the interrupt, not forty lines of dask's,
distributed's and threading's frames waiting for results (for ``%%gpurun`` cells and plain cells alike).

Installed at ``%load_ext`` around the shell's traceback formatter (``InteractiveTB.structured_traceback``; IPython's
``set_custom_exc`` would not do: its handler's traceback is shown by ``showtraceback`` but dropped by ``run_code``):
for a ``KeyboardInterrupt`` the traceback keeps the frames of the notebook's cells and of the user's own files, and
drops those of installed libraries and of this package; an interrupt of one of this package's own waits (marked
``frames_hidden``: a cluster's start, the imports begun at ``%load_ext``) and one that came in this package's own
code (a magic between its steps: ``%%gpurun --repeat`` between two runs) show as their one line; every other error
shows as before. The cluster's side of the same: ``cluster.managers.steps.quiet_abandoned_gathers``.
"""

from __future__ import annotations

import os
import sys
import sysconfig
import types
from pathlib import Path
from typing import Any

from IPython.core.interactiveshell import InteractiveShell

_LIBRARIES = tuple(
    {os.path.realpath(path) for path in (sysconfig.get_paths()["stdlib"], sysconfig.get_paths()["purelib"])}
)
_PACKAGE = str(Path(__file__).resolve().parents[__name__.count(".") - 1]) + os.sep  # gpu_magics/, from here
_KEY = "_gpu_magics_interrupt_view"


def _own(filename: str) -> bool:
    """A frame the user wrote: a cell, or a file outside the libraries and this package."""
    if filename.startswith("<"):
        return True
    path = os.path.realpath(filename)
    return not path.startswith((*_LIBRARIES, _PACKAGE, sys.prefix, sys.base_prefix))


def users_frames(tb: types.TracebackType | None) -> types.TracebackType | None:
    """``tb`` with only the user's frames (all of it where none is the user's); none where it ends in this
    package's own code: an interrupt of the package's work is its one line, as one of its waits is."""
    kept = []
    walk = tb
    while walk is not None:
        if _own(walk.tb_frame.f_code.co_filename):
            kept.append(walk)
        if walk.tb_next is None and os.path.realpath(walk.tb_frame.f_code.co_filename).startswith(_PACKAGE):
            return None
        walk = walk.tb_next
    if not kept:
        return tb
    rebuilt = None
    for entry in reversed(kept):
        rebuilt = types.TracebackType(rebuilt, entry.tb_frame, entry.tb_lasti, entry.tb_lineno)
    return rebuilt


def install(shell: InteractiveShell) -> None:
    """Show interrupts short."""
    formatter = shell.InteractiveTB
    if getattr(formatter, _KEY, None) is not None:
        return
    original = formatter.structured_traceback

    def structured_traceback(etype: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(etype, type) and issubclass(etype, KeyboardInterrupt):
            if args and getattr(args[0], "frames_hidden", False):
                args = (args[0], None, *args[2:])
                kwargs.pop("etb", None)
            elif len(args) >= 2:
                args = (args[0], users_frames(args[1]), *args[2:])
            elif "etb" in kwargs:
                kwargs["etb"] = users_frames(kwargs["etb"])
        return original(etype, *args, **kwargs)

    formatter.structured_traceback = structured_traceback  # type: ignore[method-assign]
    setattr(formatter, _KEY, original)


def uninstall(shell: InteractiveShell) -> None:
    formatter = shell.InteractiveTB
    original = getattr(formatter, _KEY, None)
    if original is not None:
        formatter.structured_traceback = original  # type: ignore[method-assign]
        delattr(formatter, _KEY)
