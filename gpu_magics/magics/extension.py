"""Loading and unloading the IPython extension: magics, configurables, formatters, clean-up."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from IPython.core.interactiveshell import InteractiveShell

# Each entry is "module:attribute". Magics classes are registered and added to ``shell.configurables`` so that
# ``%config ClassName.trait = value`` works; hooks are called with the shell on load and on unload.
MAGICS_CLASSES: tuple[str, ...] = (
    "gpu_magics.magics.gpurun:GpuMagics",
    "gpu_magics.magics.gpucluster:ClusterMagics",
    "gpu_magics.magics.gpugraph:GraphMagics",
    "gpu_magics.magics.gpumonitor:MonitorMagics",
)
LOAD_HOOKS: tuple[str, ...] = (
    "gpu_magics.cluster.background.start_logs:package_logs_to_file",  # what a catch lets go: to the kernel's log
    "gpu_magics.display.formatters:register",
    "gpu_magics.cluster.records.kernel_report:install",  # after each cell: what the kernel holds on its GPUs
    "gpu_magics.gpurun.session.plain_cells:install",  # the array display says where an array is computed
    "gpu_magics.gpurun.interrupt_view:install",  # an interrupt shows the user's lines, not dask's
    "gpu_magics.magics.cell_gate:install",  # a cell waits for the imports begun ahead; a failed start stops it
)
UNLOAD_HOOKS: tuple[str, ...] = (
    "gpu_magics.display.formatters:unregister",
    "gpu_magics.cluster.records.kernel_report:uninstall",
    "gpu_magics.gpurun.session.plain_cells:uninstall",  # plain cells back on dask's own settings
    "gpu_magics.gpurun.interrupt_view:uninstall",
    "gpu_magics.magics.cell_gate:uninstall",
    "gpu_magics.cluster.background.start_logs:package_logs_back",
)

_STATE_KEY = "_gpu_magics_instances"


def _resolve(spec: str) -> Any:
    module_name, _, attribute = spec.partition(":")
    return getattr(importlib.import_module(module_name), attribute)


def load(shell: InteractiveShell) -> None:
    instances: list[Any] = []  # IPython Magics instances (only gpu_magics.magics imports that API)
    for spec in MAGICS_CLASSES:
        magics = _resolve(spec)(shell=shell)
        shell.register_magics(magics)
        if magics not in shell.configurables:
            shell.configurables.append(magics)
        instances.append(magics)
    setattr(shell, _STATE_KEY, instances)
    for spec in LOAD_HOOKS:
        hook: Callable[[InteractiveShell], None] = _resolve(spec)
        hook(shell)


def unload(shell: InteractiveShell) -> None:
    for spec in UNLOAD_HOOKS:
        hook: Callable[[InteractiveShell], None] = _resolve(spec)
        hook(shell)
    instances: list[Any] = getattr(shell, _STATE_KEY, [])
    registry = shell.magics_manager.magics
    for magics in instances:
        close = getattr(magics, "close", None)
        if callable(close):
            close()
        for kind, names in magics.magics.items():
            for name in names:
                registry[kind].pop(name, None)
        shell.magics_manager.registry.pop(type(magics).__name__, None)
        shell.configurables[:] = [c for c in shell.configurables if c is not magics]
    setattr(shell, _STATE_KEY, [])
