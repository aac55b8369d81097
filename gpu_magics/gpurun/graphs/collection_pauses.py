"""A cell's graph built and sent without the interpreter stopping, again and again, to collect young garbage.

Building, optimizing and pickling a cell's graph makes thousands of container objects that live until the graph
has left. At CPython's default generation-0 threshold (700 allocations) that starts collection after collection,
each scanning the graph again and moving it to an older generation, and every few cells a full collection of the
kernel's whole heap, during which the scheduler of a local cluster (in this process) stops too. Measured on CPU
workers (the seed at 100 chunks, 2 cores): 9 collections and a median 3.7 ms of them before the graph left, a
mean of 10 ms with the full ones; at 400 chunks 49 collections and 9.8 ms (README, the levers' table). While a
cell runs, generation 0 is collected every ``CELL_THRESHOLD`` allocations instead (dask config
``gpu-magics.cell-gc-threshold``; 0 keeps the kernel's own thresholds): garbage is still collected, only less
often, and the kernel's thresholds are put back after the cell unless the cell set its own.

What a cell's young garbage costs is then paid once, and where it can be, while the kernel has nothing else to do:
a cell that sent its graph to a local cluster and waits for the workers collects it then
(``collect_while_waiting``, called by ``kernel_tail``), rather than when the kernel's threshold comes back at the
cell's end, inside the cell's time.
"""

from __future__ import annotations

import contextlib
import gc
import time
from collections.abc import Callable, Iterator

CELL_THRESHOLD = 50_000  # generation-0 allocations between collections while a cell runs
CONFIG_KEY = "gpu-magics.cell-gc-threshold"
DISPATCH_WAIT_S = 0.02  # how long ``collect_while_waiting`` waits for the work to leave before it gives up
POLL_S = 0.0005

_kernel_thresholds: tuple[int, ...] | None = None  # the kernel's own, while ``fewer_collections`` raised them


def cell_threshold() -> int:
    """``gpu-magics.cell-gc-threshold`` from the dask config (default ``CELL_THRESHOLD``; 0: leave gc as it is)."""
    import dask
    from IPython.core.error import UsageError

    said = dask.config.get(CONFIG_KEY, default=CELL_THRESHOLD)
    if isinstance(said, bool) or not isinstance(said, int) or said < 0:
        raise UsageError(
            f"dask config {CONFIG_KEY} is {said!r}: set a whole number of allocations between young-garbage "
            f"collections while a cell runs, {CELL_THRESHOLD} by default (0 keeps the kernel's own thresholds)"
        )
    return said


@contextlib.contextmanager
def fewer_collections() -> Iterator[None]:
    """Raise the generation-0 threshold to ``cell_threshold()`` inside the block, where it is above the kernel's
    own and automatic collection is on; put the kernel's thresholds back after, unless the block changed them."""
    wanted = cell_threshold()
    before = gc.get_threshold()
    if wanted <= before[0] or before[0] == 0:  # already as rare, or automatic collection is off by threshold
        yield
        return
    raised = (wanted, *before[1:])
    global _kernel_thresholds
    outer, _kernel_thresholds = _kernel_thresholds, before
    gc.set_threshold(*raised)
    try:
        yield
    finally:
        _kernel_thresholds = outer
        if gc.get_threshold() == raised:
            gc.set_threshold(*before)


def collect_while_waiting(dispatched: Callable[[], bool], wait_s: float = DISPATCH_WAIT_S) -> bool:
    """Inside ``fewer_collections``, where more young garbage is pending than the kernel's own threshold allows:
    once ``dispatched()`` says the cell's work has left this process (polled for up to ``wait_s``: a local
    scheduler runs in this process and must not wait for the collection), collect it now, while the kernel only
    waits. Whether it collected."""
    kernel = _kernel_thresholds
    if kernel is None or gc.get_threshold()[0] <= kernel[0] or gc.get_count()[0] <= kernel[0]:
        return False
    deadline = time.monotonic() + wait_s
    while not dispatched():
        if time.monotonic() >= deadline:
            return False
        time.sleep(POLL_S)
    gc.collect(0)
    return True
