"""How long the rich displays take, and how big they are, on huge collections (target: under 200 ms each).

Run: ``python benchmarks/display_speed.py``. Times are the best of a few runs of building the view and
rendering both its HTML and its text; collections are built once, outside the timing.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import dask.array as da

from gpu_magics.display import ArrayView, array_view, graph_summary

TARGET_S = 0.2


def measure(label: str, render: Callable[[], Any], repeat: int = 5) -> bool:
    best = float("inf")
    size = 0
    for _ in range(repeat):
        start = time.perf_counter()
        view = render()
        size = len(view.html()) + len(view.text())
        best = min(best, time.perf_counter() - start)
    ok = best < TARGET_S
    print(f"{label:<48} {best * 1e3:8.1f} ms {size / 1e3:8.1f} kB  {'ok' if ok else 'SLOW'}")
    return ok


def main() -> None:
    array_view.set_gpu_memory_probe(lambda: (141 * 10**9,) * 4)
    mode = "array expressions" if da.array_expr_enabled() else "classic graphs"
    print(f"dask.array with {mode}")
    square = da.ones((1_000_000, 1_000_000), chunks=(1000, 1000))
    line = da.ones((1_000_000,), chunks=1)
    x = da.random.random((60_000, 60_000), chunks=(300, 300))
    seed = (x + x.T).mean()
    deep = da.ones((1000, 1000), chunks=(10, 10))  # 10,000 chunks through 60 operations
    for i in range(60):
        deep = deep * 1.0001 + i
    results = [
        measure("array, 1,000 x 1,000 = 1,000,000 chunks", lambda: ArrayView(square)),
        measure("array, 1-D with 1,000,000 chunks", lambda: ArrayView(line)),
        measure("graph summary, seed workload (~170,000 tasks)", lambda: graph_summary(seed)),
        measure("graph summary, 121 layers, ~1,200,000 tasks", lambda: graph_summary(deep)),
        measure("array display of the seed workload's result", lambda: ArrayView(seed)),
    ]
    print("all under 200 ms" if all(results) else "SOME ABOVE 200 ms")


if __name__ == "__main__":
    main()
