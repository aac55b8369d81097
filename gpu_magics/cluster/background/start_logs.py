"""In the kernel: the log file that distributed's own lines go to instead of the notebook.

While a cluster starts in the background, the kernel's ``distributed`` loggers (its nannies, scheduler and
deploy code) write here (``kernel_logs_to_file``); worker processes forked from this package's worker server
write their standard error here for their whole life (the server sends it here: ``forkserver``). A start that
fails says so in one line naming this file. The package's own logger (``units.dropped``: what a catch let go)
writes here for the kernel's whole life, from ``%load_ext`` on (``package_logs_to_file``). The file is the kernel's
own (0600) and goes when the kernel shuts down with nothing in it.
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
from gpu_magics.text import units
from gpu_magics.text.errors import GpuMagicsError, StartFailed

LOGGERS = ("distributed", "dask_cuda", "tornado.application", "asyncio")
FORMAT = "%(asctime)s %(name)s %(levelname)s %(message)s"


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
    handler.setFormatter(logging.Formatter(FORMAT))
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


class _KernelFile(logging.Handler):
    """Each record appended to this kernel's log file at once (made again if it went, in the runtime directory of
    the moment); a record that cannot be written is lost, never shown."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            first, *rest = self.format(record).split("\n")
            text = "\n".join([first, *(f"    {line}" for line in rest)])  # a traceback here is never ``last_error``
            with log_path().open("a", encoding="utf-8") as file:
                file.write(text + "\n")
        except Exception:  # anything goes: as in logging's own handlers, a record never fails the code that logs
            return


_package_file = _KernelFile(logging.DEBUG)
_package_file.setFormatter(logging.Formatter(FORMAT))
_before: list[tuple[bool, int]] = []  # the logger's propagate and level before ``package_logs_to_file``


GC_NOTES = "distributed.gc"  # slow garbage collections, where distributed's GC diagnosis runs (``kept_interrupts``)
COMM_NOTES = "distributed.batched"  # its stream to a worker that went (a stop, a cancelled batch job): a traceback
NOTES = (GC_NOTES, COMM_NOTES)


def package_logs_to_file(shell: object = None) -> None:
    """At ``%load_ext``: the ``gpu_magics`` logger writes every record (debug included, unless its level was set)
    to this kernel's log file and nowhere else (not to the notebook's stderr); so do the notes of a scheduler this
    kernel hosts that say nothing a cell can act on: its garbage collections ("full garbage collections took 12%
    CPU time recently") and the closed stream of a worker that went ("Batched Comm Closed", with a traceback)."""
    if _package_file in units.logger.handlers:
        return
    loggers = [units.logger, *(logging.getLogger(name) for name in NOTES)]
    _before[:] = [(logger.propagate, logger.level) for logger in loggers]
    for logger in loggers:
        logger.addHandler(_package_file)
        logger.propagate = False
    if units.logger.level == logging.NOTSET:
        units.logger.setLevel(logging.DEBUG)


def package_logs_back(shell: object = None) -> None:
    """At ``%unload_ext``: the ``gpu_magics`` logger and the scheduler's notes as they were before
    ``package_logs_to_file``."""
    if _package_file not in units.logger.handlers:
        return
    loggers = [units.logger, *(logging.getLogger(name) for name in NOTES)]
    before = list(_before) or [(True, logging.NOTSET)] * len(loggers)
    _before.clear()
    for logger, (propagate, level) in zip(loggers, before, strict=False):
        logger.removeHandler(_package_file)
        logger.propagate = propagate
        logger.setLevel(level)


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
    wrote there names the file and the last error in it. A scheduler started here leaves interrupts alone
    (``kept_interrupts.scheduler_gc_off``)."""
    from gpu_magics.cluster.background import kept_interrupts

    kept_interrupts.scheduler_gc_off()
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
        kind = type(error) if isinstance(error, GpuMagicsError) else StartFailed
        raise kind(f"{said} (distributed's log: {shown(log)})") from None


def remove_if_empty() -> None:
    """At the kernel's shutdown: remove this kernel's log file when nothing was written to it."""
    with contextlib.suppress(OSError):
        path = runtime_dir() / f"gpu-magics-kernel-{os.getpid()}.log"
        if path.stat().st_size == 0:
            path.unlink()
