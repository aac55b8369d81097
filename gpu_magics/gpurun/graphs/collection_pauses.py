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
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator

CELL_THRESHOLD = 50_000  # generation-0 allocations between collections while a cell runs
CONFIG_KEY = "gpu-magics.cell-gc-threshold"


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
    gc.set_threshold(*raised)
    try:
        yield
    finally:
        if gc.get_threshold() == raised:
            gc.set_threshold(*before)
