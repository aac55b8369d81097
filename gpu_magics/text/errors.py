"""The package's own error types (as an HTTP client has its own): each one is a line the user can act on, raised
where the package finds what cannot be done, and caught by what it names.

They are IPython's ``UsageError`` underneath, so a caller that expected one before still catches them, and a caller
that expects one kind catches that kind only. The notebook shows only IPython's own ``UsageError`` as one line (a
subclass gets its traceback), so every entry point the notebook calls (the magics, the cell hooks, ``client()``) is
wrapped in ``said_in_one_line``, which turns the package's error into that one line.

    GpuMagicsError          anything this package says in one line
    ├── LineError           the line asks for what cannot be (an option's value, a name not there, a count too big)
    └── ClusterError        the cluster cannot do what is asked
        ├── NoCluster       none runs (or starts) in this kernel
        ├── NotOurs         it is not this kernel's to change (attached, adopted)
        ├── StartFailed     a start, restart or scale failed; the line says why
        └── ServiceError    a service the workers come from (a scheduler, a gateway, SLURM) refused or is silent
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


def said_in_one_line(entry: Callable[P, R]) -> Callable[P, R]:
    """Wrap an entry point the notebook calls (a magic, a cell hook): the package's errors leave it as IPython's
    own ``UsageError``, which the notebook shows as the one line, without a traceback."""

    @functools.wraps(entry)
    def said(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return entry(*args, **kwargs)
        except GpuMagicsError as error:
            raise UsageError(str(error)) from None

    return said
