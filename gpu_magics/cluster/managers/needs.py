"""What a start needs installed, checked before it starts: the packages its kind of cluster needs (dask-jobqueue,
dask-gateway, dask-cuda), and the communication protocol a ``--protocol`` choice means with the installed packages.

Packages are imported here, with one line when they are missing and another when they are installed but their
import fails (a broken install, a version that does not match distributed): an ``ImportError`` is not always a
missing package.

Protocols: ``tcp`` is distributed's own. UCX (NVLink, InfiniBand) comes from ``distributed-ucxx``: distributed
itself only keeps a ``ucx`` stub that prints a ``FutureWarning`` and raises it, so a cluster asked for ``ucx`` without
``distributed-ucxx`` printed that warning and "Scheduler failed to start" before failing. Here ``ucx`` and ``ucxx``
are one choice: it maps to the scheme the installed ``distributed-ucxx`` registers (``ucx`` in recent releases,
``ucxx`` in older ones), and without it the start stops at once with one line saying what to install.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import warnings
from collections.abc import Callable
from types import ModuleType
from typing import TypeVar

from gpu_magics.text.errors import LineError
from gpu_magics.text.units import one_line

T = TypeVar("T")

UCX_SPELLINGS = frozenset({"ucx", "ucxx"})
BACKENDS_GROUP = "distributed.comm.backends"
UCXX_DISTRIBUTION = "distributed-ucxx"
UCXX_INSTALL = (
    "pip install distributed-ucxx-cu12 (or -cu13 for CUDA 13), or conda install -c rapidsai -c conda-forge "
    "distributed-ucxx"
)


def comm_protocol(requested: str, prog: str = "%gpucluster") -> str:
    """The protocol to give distributed for ``--protocol requested``; ``LineError`` when UCX is asked for and
    no installed package provides it."""
    if requested not in UCX_SPELLINGS:
        return requested
    schemes = ucxx_schemes()
    for scheme in ("ucx", "ucxx"):
        if scheme in schemes:
            return scheme
    if legacy_ucx_py():
        return "ucx"
    raise LineError(
        f"{prog} --protocol {requested}: UCX needs the distributed-ucxx package, which is not installed "
        f"({UCXX_INSTALL}); or leave --protocol out for tcp"
    )


def ucxx_schemes() -> frozenset[str]:
    """The address schemes that an installed ``distributed-ucxx`` registers with distributed (none without it)."""
    if importlib.util.find_spec("distributed_ucxx") is None:
        return frozenset()
    found = set()
    for entry in importlib.metadata.entry_points(group=BACKENDS_GROUP):
        if entry.value.split(":")[0].split(".")[0] == "distributed_ucxx":
            found.add(entry.name)
    return frozenset(found or {"ucxx"})  # installed without its metadata: its historical scheme


def legacy_ucx_py() -> bool:
    """Whether this distributed still has its own working ``ucx`` backend (releases before UCX-Py's removal)
    and UCX-Py (``ucp``) is installed."""
    if importlib.util.find_spec("ucp") is None:
        return False
    try:
        from distributed.comm import ucx
    except ImportError:
        return False
    return not hasattr(ucx, "_raise_deprecated")


def quiet_ucx_deprecations(make: Callable[[], T], protocol: str) -> Callable[[], T]:
    """``make`` with the ``FutureWarning`` about UCX-Py's deprecation silenced while it runs (dask-cuda before
    25.10 warns on every UCX-Py start); other protocols are left as they are."""
    if protocol not in UCX_SPELLINGS:
        return make

    def quiet() -> T:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=r"(?s).*\bucx", category=FutureWarning)
            return make()

    return quiet


def is_missing(error: ImportError, module: str) -> bool:
    """Whether ``error`` says that ``module``'s package (its top-level name) is not installed."""
    top = module.split(".")[0]
    name = getattr(error, "name", None) if isinstance(error, ModuleNotFoundError) else None
    return name is not None and name.split(".")[0] == top


def require(module: str, what: str, missing: str) -> ModuleType:
    """``module`` imported; a ``LineError`` line ``what: missing`` when its package is not installed, and
    ``what: importing MODULE failed (...)`` when it is but its import fails."""
    try:
        return importlib.import_module(module)
    except ImportError as error:
        if is_missing(error, module):
            raise LineError(f"{what}: {missing}") from None
        raise LineError(
            f"{what}: {module.split('.')[0]} is installed but importing {module} failed ({one_line(error)})"
        ) from None


def has(module: str) -> bool:
    """Whether ``module``'s package is installed (found, not imported)."""
    try:
        return importlib.util.find_spec(module.split(".")[0]) is not None
    except (ImportError, ValueError):
        return False
