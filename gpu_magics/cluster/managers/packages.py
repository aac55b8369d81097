"""The packages a kind of cluster needs (dask-jobqueue, dask-gateway, dask-cuda): imported here, with one line when
they are missing, and one other line when they are installed but their import fails (a broken install, a version
that does not match distributed): an ``ImportError`` is not always a missing package."""

from __future__ import annotations

import importlib
import importlib.util
from types import ModuleType

from IPython.core.error import UsageError

from gpu_magics.units import one_line


def is_missing(error: ImportError, module: str) -> bool:
    """Whether ``error`` says that ``module``'s package (its top-level name) is not installed."""
    top = module.split(".")[0]
    name = getattr(error, "name", None) if isinstance(error, ModuleNotFoundError) else None
    return name is not None and name.split(".")[0] == top


def require(module: str, what: str, missing: str) -> ModuleType:
    """``module`` imported; a ``UsageError`` line ``what: missing`` when its package is not installed, and
    ``what: importing MODULE failed (...)`` when it is but its import fails."""
    try:
        return importlib.import_module(module)
    except ImportError as error:
        if is_missing(error, module):
            raise UsageError(f"{what}: {missing}") from None
        raise UsageError(
            f"{what}: {module.split('.')[0]} is installed but importing {module} failed ({one_line(error)})"
        ) from None


def installed(module: str) -> bool:
    """Whether ``module``'s package is installed (found, not imported)."""
    try:
        return importlib.util.find_spec(module.split(".")[0]) is not None
    except (ImportError, ValueError):
        return False
