"""The package's own error types (as an HTTP client has its own): each one is a line the user can act on, raised
where the package finds what cannot be done, and caught by what it names.

They are IPython's ``UsageError`` underneath, so a caller that expected one before still catches them, and a caller
that expects one kind catches that kind only. The notebook shows only IPython's own ``UsageError`` as one line (a
subclass gets its traceback), so every entry point the notebook calls (the magics, the cell hooks, ``client()``) is
wrapped in ``said_in_one_line``, which turns the package's error into that one line.

    GpuMagicsError          anything this package says in one line
    ├── LineError           the line asks for what cannot be (an option's value, a name not there, a count too big)
    │   ├── SettingError    a ``%config`` value the magics refuse (the cell that sets it fails)
    │   └── CellError       the cell itself cannot run as asked (top-level await, it does not parse)
    ├── ClusterError        the cluster cannot do what is asked
    │   ├── NoCluster       none runs (or starts) in this kernel
    │   ├── NotOurs         it is not this kernel's to change (attached, adopted)
    │   ├── StartFailed     a start, restart or scale failed; the line says why
    │   └── ServiceError    a service the workers come from (a scheduler, a gateway, SLURM) refused or is silent
    └── RankError           SPMD ranks cannot do what is asked (a rank's worker silent, a value that cannot travel)

``said_in_one_line`` and ``shown_as_one_line`` are the only places an IPython ``UsageError`` is made.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import ParamSpec, TypeVar

from IPython.core.error import UsageError

P = ParamSpec("P")
R = TypeVar("R")


class GpuMagicsError(UsageError):
    """Anything this package says in one line; the message is the whole of it."""


class LineError(GpuMagicsError):
    """The line asks for what cannot be: an option's value, a variable that is not there, a count the host cannot
    give."""


class SettingError(LineError):
    """A ``%config`` value one of the magics refuses; the line says which values it takes."""


class CellError(LineError):
    """The cell cannot run as asked (a top-level ``await``, a cell that does not parse)."""


class RankError(GpuMagicsError):
    """SPMD ranks cannot do what was asked: a rank's worker did not answer, the processes did not start, a value
    cannot travel to them or back."""


class ClusterError(GpuMagicsError):
    """The cluster cannot do what was asked."""


class NoCluster(ClusterError):
    """No cluster runs (or starts) in this kernel; the line says how to start one."""


class NotOurs(ClusterError):
    """The cluster is not this kernel's to change (it attached to it, or adopted the user's manager)."""


class StartFailed(ClusterError):
    """A start, restart or scale failed; the line says why."""


class ServiceError(ClusterError):
    """A service the workers come from (a scheduler, a gateway, SLURM) refused or did not answer."""


def shown_as_one_line(message: str) -> UsageError:
    """IPython's own ``UsageError`` with ``message``: what the notebook shows as one line, without a traceback
    (for an error that reaches the user outside an entry point, such as a future's exception)."""
    return UsageError(message)


def said_in_one_line(entry: Callable[P, R]) -> Callable[P, R]:
    """Wrap an entry point the notebook calls (a magic, a cell hook): the package's errors leave it as IPython's
    own ``UsageError``, which the notebook shows as the one line, without a traceback."""

    @functools.wraps(entry)
    def said(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return entry(*args, **kwargs)
        except GpuMagicsError as error:
            raise shown_as_one_line(str(error)) from None

    return said
