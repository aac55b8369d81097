"""Loading and unloading the IPython extension: magics, configurables, formatters, clean-up; an interrupt of the
load is one line and leaves the extension not loaded."""

from __future__ import annotations

import contextlib
import importlib
import signal
import threading
from collections.abc import Callable, Iterator
from typing import Any

from IPython.core.interactiveshell import InteractiveShell

# Each entry is "module:attribute". Magics classes are registered and added to ``shell.configurables`` so that
# ``%config ClassName.trait = value`` works; hooks are called with the shell on load and on unload.
MAGICS_CLASSES: tuple[str, ...] = (
    "gpu_magics.magics.gpurun:GpuMagics",
    "gpu_magics.magics.gpucluster:ClusterMagics",
    "gpu_magics.magics.gpugraph:GraphMagics",
    "gpu_magics.magics.gpumonitor:MonitorMagics",
    "gpu_magics.magics.gpumemory:MemoryMagics",
)
LOAD_HOOKS: tuple[str, ...] = (
    "gpu_magics.cluster.background.start_logs:package_logs_to_file",  # what a catch lets go: to the kernel's log
    "gpu_magics.cluster.background.kept_interrupts:install",  # an interrupt always ends the cell
    "gpu_magics.cluster.workers.kernel_park:install",  # a parked kernel comes back before anything runs
    "gpu_magics.cluster.workers.kernel_arrays:install_on_import",  # the kernel's CuPy arrays parked at the bus's pace
    "gpu_magics.display.formatters:register",
    "gpu_magics.text.said:install",  # a line said from a thread goes to the cell at hand, or the next one
    "gpu_magics.cluster.records.kernel_report:install",  # after each cell: what the kernel holds on its GPUs
    "gpu_magics.magics.gpumemory:install_panel_names",  # ... and by which names, for the side panel
    "gpu_magics.magics.gpumemory:install_cap",  # the kernel within its share of the notebook's memory cap
    "gpu_magics.gpurun.session.plain_cells:install",  # the array display says where an array is computed
    "gpu_magics.gpurun.live.interrupt_view:install",  # an interrupt shows the user's lines, not dask's
    "gpu_magics.magics.cell_gate:install",  # a start that failed in the background stops the next cell
    "gpu_magics.magics.config_gate:install",  # a %config value the magics refuse fails its cell
)
UNLOAD_HOOKS: tuple[str, ...] = (
    "gpu_magics.display.formatters:unregister",
    "gpu_magics.text.said:uninstall",
    "gpu_magics.magics.gpumemory:uninstall_panel_names",
    "gpu_magics.cluster.records.kernel_report:uninstall",
    "gpu_magics.gpurun.session.plain_cells:uninstall",  # plain cells back on dask's own settings
    "gpu_magics.gpurun.live.interrupt_view:uninstall",
    "gpu_magics.magics.gpumemory:uninstall_cap",  # after the interrupt view, which wrapped what this wrapped
    "gpu_magics.magics.cell_gate:uninstall",
    "gpu_magics.magics.config_gate:uninstall",
    "gpu_magics.cluster.background.kept_interrupts:uninstall",
    "gpu_magics.cluster.workers.kernel_park:uninstall",
    "gpu_magics.cluster.workers.kernel_arrays:stop_watching",
    "gpu_magics.cluster.background.start_logs:package_logs_back",
)

_STATE_KEY = "_gpu_magics_instances"


def _resolve(spec: str) -> Any:
    module_name, _, attribute = spec.partition(":")
    return getattr(importlib.import_module(module_name), attribute)


def load(shell: InteractiveShell) -> None:
    """Import the magics and hooks (an interrupt here leaves nothing behind), then register them with interrupts
    held: an interrupt meanwhile unloads what was registered once all of it is, so the extension is either loaded
    or not at all, and ``%load_ext`` can run again. Either interrupt ends the cell in one line."""
    try:
        classes = [_resolve(spec) for spec in MAGICS_CLASSES]
        hooks: list[Callable[[InteractiveShell], None]] = [_resolve(spec) for spec in LOAD_HOOKS]
    except KeyboardInterrupt:
        raise _interrupted(shell) from None
    instances: list[Any] = []  # IPython Magics instances (only gpu_magics.magics imports that API)
    setattr(shell, _STATE_KEY, instances)
    with _interrupts_held() as held:
        for made in classes:
            magics = made(shell=shell)
            instances.append(magics)
            shell.register_magics(magics)
            if magics not in shell.configurables:
                shell.configurables.append(magics)
        for hook in hooks:
            hook(shell)
    if held:
        with _interrupts_held():
            unload(shell)
        raise _interrupted(shell)


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


@contextlib.contextmanager
def _interrupts_held() -> Iterator[list[object]]:
    """An interrupt (SIGINT) that comes in the block is held: the list it yields says whether one came."""
    held: list[object] = []
    if threading.current_thread() is not threading.main_thread():  # only the main thread gets interrupts
        yield held
        return
    handler = signal.signal(signal.SIGINT, lambda *_: held.append(True))
    try:
        yield held
    finally:
        signal.signal(signal.SIGINT, handler)


def _interrupted(shell: InteractiveShell) -> KeyboardInterrupt:
    """The interrupt of ``%load_ext``, shown as its one line (the interrupt view went with the extension)."""
    from gpu_magics.cluster.background.starting import short_interrupt

    interrupt = short_interrupt("%load_ext gpu_magics was interrupted and did not load; run it again")
    formatter = shell.InteractiveTB
    shown = formatter.__dict__.get("structured_traceback")  # the shell's own, or a view wrapped around it

    def structured_traceback(etype: Any, *args: Any, **kwargs: Any) -> Any:
        if formatter.__dict__.get("structured_traceback") is structured_traceback:  # once: back as it was
            if shown is None:
                del formatter.structured_traceback
            else:
                formatter.structured_traceback = shown  # type: ignore[method-assign]
        if args and args[0] is interrupt:
            args = (args[0], None, *args[2:])
            kwargs.pop("etb", None)
        return (shown or type(formatter).structured_traceback.__get__(formatter))(etype, *args, **kwargs)

    formatter.structured_traceback = structured_traceback  # type: ignore[method-assign]
    return interrupt
