"""The package's one logger, ``gpu_magics``, and ``dropped``: the trace an error leaves where a catch lets it go.

In a kernel (after ``%load_ext gpu_magics``) the logger's records go to the kernel's log file and nowhere else, never
to the notebook (``cluster.background.start_logs.package_logs_to_file``); in other processes (the jupyter-server
extension, a worker) they follow that process's own logging settings. Imports the standard library only.
"""

from __future__ import annotations

import logging

logger = logging.getLogger("gpu_magics")

_said: set[tuple[str, str]] = set()


def dropped(what: str, error: BaseException, *, level: int = logging.DEBUG, once: bool = False) -> None:
    """Log, with its traceback, that ``what`` failed with ``error`` and the code went on without it. ``once``: only
    the first time ``what`` fails with this type of error in this process (for a loop that would repeat it)."""
    if once:
        key = (what, type(error).__qualname__)
        if key in _said:
            return
        _said.add(key)
    logger.log(level, "%s (let go): %s: %s", what, type(error).__name__, error, exc_info=error)
