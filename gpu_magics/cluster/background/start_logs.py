"""In the kernel: the log file that distributed's own lines go to instead of the notebook.

While a cluster starts in the background, the kernel's ``distributed`` loggers (its nannies, scheduler and
deploy code) write here (``kernel_logs_to_file``); worker processes forked from this package's worker server
write their standard error here for their whole life (the server sends it here: ``forkserver``). A start that
fails says so in one line naming this file. The file is the kernel's own (0600) and goes when the kernel shuts
down with nothing in it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
from collections.abc import Iterator
from pathlib import Path

from IPython.core.error import UsageError

from gpu_magics.cluster.records.record import runtime_dir

LOGGERS = ("distributed", "dask_cuda", "tornado.application", "asyncio")


def log_path() -> Path:
    """``<runtime dir>/gpu-magics-kernel-<pid>.log``: this kernel's file, created (0600) if missing."""
    directory = runtime_dir()
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    path = directory / f"gpu-magics-kernel-{os.getpid()}.log"
    os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600))
    return path


def shown(path: Path) -> str:
    """``path`` as a line shows it: under the home directory as ``~/...``."""
    with contextlib.suppress(ValueError):
        return "~/" + str(path.relative_to(Path.home()))
    return str(path)


@contextlib.contextmanager
def kernel_logs_to_file(path: Path) -> Iterator[None]:
    """Inside the block, the kernel's ``LOGGERS`` write to ``path`` only (not to the notebook's stderr)."""
    handler = logging.FileHandler(path, encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s %(message)s"))
    saved = {}
    for name in LOGGERS:
        logger = logging.getLogger(name)
        saved[name] = (list(logger.handlers), logger.propagate)
        logger.handlers = [handler]
        logger.propagate = False
    try:
        yield
    finally:
        for name, (handlers, propagate) in saved.items():
            logger = logging.getLogger(name)
            logger.handlers = handlers
            logger.propagate = propagate
        handler.close()


def last_error(path: Path, since: int) -> str | None:
    """The last exception line (``ModuleNotFoundError: No module named 'x'``) written to ``path`` after its first
    ``since`` bytes, or ``None``."""
    try:
        with path.open("rb") as file:
            file.seek(since)
            written = file.read().decode("utf-8", "replace")
    except OSError:
        return None
    found = re.findall(r"^(?:[\w.]+\.)?(\w*(?:Error|Exception|Exit)\b[^\n]*)$", written, re.MULTILINE)
    return found[-1].strip() if found else None


@contextlib.contextmanager
def during_start(wanted: bool) -> Iterator[None]:
    """Inside the block (a start, ``wanted``: of a cluster started here), distributed's lines go to this kernel's
    log file (nowhere else when it cannot be written); a ``UsageError`` that leaves the block after distributed
    wrote there names the file and the last error in it."""
    try:
        log = log_path() if wanted else None
    except OSError:
        log = None
    if log is None:
        yield
        return
    size = log.stat().st_size
    try:
        with kernel_logs_to_file(log):
            yield
    except UsageError as error:
        if log.stat().st_size <= size:
            raise
        cause = last_error(log, size)
        said = f"{error}" + (f"; the log says {cause}" if cause and cause not in str(error) else "")
        raise UsageError(f"{said} (distributed's log: {shown(log)})") from None


def remove_if_empty() -> None:
    """At the kernel's shutdown: remove this kernel's log file when nothing was written to it."""
    with contextlib.suppress(OSError):
        path = runtime_dir() / f"gpu-magics-kernel-{os.getpid()}.log"
        if path.stat().st_size == 0:
            path.unlink()
