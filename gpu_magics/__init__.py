"""gpu-magics: interactive multi-GPU computing in IPython and JupyterLab.

``%load_ext gpu_magics`` registers ``%%gpurun`` and the other magics. Importing this package does no GPU,
CUDA or NVML work; CuPy and dask-cuda are imported only when a GPU path needs them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

if TYPE_CHECKING:
    from distributed import Client
    from IPython.core.interactiveshell import InteractiveShell

__all__ = ["__version__", "client", "load_ipython_extension", "unload_ipython_extension"]


def load_ipython_extension(shell: InteractiveShell) -> None:
    """Register the magics, formatters and configurables with ``shell``."""
    from gpu_magics import extension

    extension.load(shell)


def unload_ipython_extension(shell: InteractiveShell) -> None:
    """Unregister everything ``load_ipython_extension`` registered and release what it started."""
    from gpu_magics import extension

    extension.unload(shell)


def client() -> Client:
    """The distributed ``Client`` of the cluster that ``%gpucluster`` started or attached to."""
    from gpu_magics.cluster import lifecycle as cluster

    return cluster.require_client()


def _jupyter_labextension_paths() -> list[dict[str, str]]:
    return [{"src": "labextension", "dest": "gpu-magics"}]


def _jupyter_server_extension_points() -> list[dict[str, Any]]:
    return [{"module": "gpu_magics.server"}]
