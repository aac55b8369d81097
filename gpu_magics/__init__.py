"""gpu-magics: interactive multi-GPU computing in IPython and JupyterLab.

``%load_ext gpu_magics`` registers ``%%gpurun`` and the other magics. Importing this package does no GPU,
CUDA or NVML work; CuPy and dask-cuda are imported only when a GPU path needs them.
"""

from __future__ import annotations

import json
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any


def _version() -> str:
    """This distribution's version, which its build takes from ``labextension/package.json``.

    Without an installed distribution (a checkout on ``sys.path``): the built extension's ``package.json``, else
    ``"0.0.0"``.
    """
    try:
        return metadata.version("gpu-magics")
    except metadata.PackageNotFoundError:
        pass
    try:
        package = json.loads((Path(__file__).parent / "labextension" / "package.json").read_text(encoding="utf-8"))
        return str(package["version"])
    except (OSError, ValueError, KeyError, TypeError):
        return "0.0.0"


__version__ = _version()

if TYPE_CHECKING:
    from distributed import Client
    from IPython.core.interactiveshell import InteractiveShell

__all__ = ["__version__", "client", "load_ipython_extension", "philox_random_state", "unload_ipython_extension"]


def load_ipython_extension(shell: InteractiveShell) -> None:
    """Register the magics, formatters and configurables with ``shell``."""
    from gpu_magics.magics import extension

    extension.load(shell)


def unload_ipython_extension(shell: InteractiveShell) -> None:
    """Unregister everything ``load_ipython_extension`` registered and release what it started."""
    from gpu_magics.magics import extension

    extension.unload(shell)


def client() -> Client:
    """The distributed ``Client`` of the cluster that ``%gpucluster`` started or attached to."""
    from gpu_magics.cluster.control import queries
    from gpu_magics.text.errors import said_in_one_line

    return said_in_one_line(queries.require_client)()


def philox_random_state(seed: Any = None) -> Any:
    """A ``dask.array.random.RandomState`` whose chunks draw with CuPy's Philox generator (dask's API; CuPy's
    default XORWOW spends most of a small chunk's time setting up): ``rs = gpu_magics.philox_random_state(42)``,
    then ``x = rs.normal(10, 1, size=..., chunks=...)``."""
    from gpu_magics.arrays.philox import philox_random_state as make

    return make(seed)


def _jupyter_labextension_paths() -> list[dict[str, str]]:
    return [{"src": "labextension", "dest": "gpu-magics"}]


def _jupyter_server_extension_points() -> list[dict[str, Any]]:
    return [{"module": "gpu_magics.server"}]
