"""The package's own error types (as an HTTP client has its own): each one is a line the user can act on, raised
where the package finds what cannot be done, and caught by what it names.

They are IPython's ``UsageError`` underneath, so that wherever one reaches the notebook (a magic, a cell's hook, a
plain cell that a session runs) the notebook shows its one line and no traceback, as it does for a magic's bad line:
the magics need no translation of their own, and a caller that expects one kind catches that kind only.

    GpuMagicsError          anything this package says in one line
    ├── LineError           the line asks for what cannot be (an option's value, a name not there, a count too big)
    └── ClusterError        the cluster cannot do what is asked
        ├── NoCluster       none runs (or starts) in this kernel
        ├── NotOurs         it is not this kernel's to change (attached, adopted)
        ├── StartFailed     a start, restart or scale failed; the line says why
        └── ServiceError    a service the workers come from (a scheduler, a gateway, SLURM) refused or is silent
"""

from __future__ import annotations

from IPython.core.error import UsageError


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
