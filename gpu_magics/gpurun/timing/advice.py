"""One line of advice after a GPU cell, derived from its time split: when most GPU time went to setting up
XORWOW generators (one per chunk), the Philox generator that avoids it; on several GPUs, when the chunks are too
few or do not split evenly over them, chunks that do, and when one GPU did most of the work, why (this kernel's
own use of that GPU, or another process); when fixed costs per task dominate, the chunk size that gives each task
enough work (``chunk_advice``). Never changes the user's chunks or generator."""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from gpu_magics.arrays import chunk_advice
from gpu_magics.arrays.philox import CALL
from gpu_magics.gpurun.timing.time_split import TimeSplit
from gpu_magics.text.units import dropped, format_bytes, format_seconds

if TYPE_CHECKING:
    from distributed import Client
    from IPython.core.interactiveshell import InteractiveShell


# dask.array.random functions that draw a chunk each from a generator seeded for that chunk
RANDOM_FUNCTIONS = frozenset(
    {
        "beta", "binomial", "chisquare", "exponential", "f", "gamma", "geometric", "gumbel", "hypergeometric",
        "integers", "laplace", "logistic", "lognormal", "logseries", "negative_binomial", "noncentral_chisquare",
        "noncentral_f", "normal", "pareto", "poisson", "power", "randint", "random", "random_integers",
        "random_sample", "rayleigh", "standard_cauchy", "standard_exponential", "standard_gamma",
        "standard_normal", "standard_t", "triangular", "uniform", "vonmises", "wald", "weibull", "zipf",
    }
)  # fmt: skip
GENERATOR_SHARE = 0.3  # advise Philox when XORWOW set-up takes at least this share of the GPU time
BUSIEST = 1.5  # one worker computing this many times its even share (1/N of the work) did "most of the work"
LOW_COMPUTE_SHARE = 0.6  # below this share of busy GPU time, fixed costs dominate

MAX_ADVICE = 160  # characters: advice is read at a glance

Found = TypeVar("Found")


def courteous(what: str, ask: Callable[[], Found], failed: Found) -> Found:
    """``ask()``, or ``failed`` where it fails (``what`` failed, in the debug log): advice is a courtesy, and a
    cell never fails over it."""
    try:
        return ask()
    except Exception as error:  # advice is a courtesy: never fail a cell over it, whatever went wrong
        dropped(what, error)
        return failed


@dataclass(frozen=True)
class ArrayChunks:
    """A dask array the cell made: its name, shape and chunk size."""

    name: str
    shape: tuple[int, ...]
    chunksize: tuple[int, ...]
    chunk_bytes: float
    xorwow_draws: dict[str, int] = field(default_factory=dict)  # dask.array.random function -> XORWOW chunks


def xorwow_draws(array: Any, numpy_means_device: bool = False) -> dict[str, int]:
    """The chunks of ``array``'s graph drawn from CuPy's default generator (a ``cupy.random.RandomState`` made
    per chunk: XORWOW), by function; with ``numpy_means_device``, NumPy's ``RandomState`` counts too (a kernel
    without a GPU, whose draws the workers make with CuPy's default). A generator the user chose (a partial with
    Philox, say) is not counted."""
    from dask.array.random import _apply_random
    from dask.highlevelgraph import HighLevelGraph, MaterializedLayer

    graph = array.__dask_graph__()
    if not isinstance(graph, HighLevelGraph):
        return {}
    found: dict[str, int] = {}
    for layer in graph.layers.values():
        if not isinstance(layer, MaterializedLayer):
            continue
        for node in layer.mapping.values():
            if getattr(node, "func", None) is not _apply_random or len(node.args) < 2:
                continue
            generator = node.args[0]
            module = getattr(generator, "__module__", "") or ""
            default = getattr(generator, "__name__", "") == "RandomState" and (
                module.startswith("cupy") or (numpy_means_device and module.startswith("numpy"))
            )
            if default:
                found[str(node.args[1])] = found.get(str(node.args[1]), 0) + 1
    return found


def random_chunks(split: TimeSplit) -> int:
    """How many of the cell's tasks drew random numbers (their names hold a dask.array.random function)."""
    return sum(count for prefix, count in split.prefixes.items() if RANDOM_FUNCTIONS.intersection(prefix.split("-")))


def arrays_made(
    namespace: Mapping[str, Any], names: Iterable[str], numpy_means_device: bool = False
) -> list[ArrayChunks]:
    """The dask arrays among ``names`` in ``namespace`` with known shapes, largest first (``xorwow_draws``
    says what ``numpy_means_device`` does)."""
    found = []
    for name in names:
        value = namespace.get(name)
        shape, chunksize = getattr(value, "shape", None), getattr(value, "chunksize", None)
        if value is None or not hasattr(value, "__dask_graph__") or shape is None or chunksize is None:
            continue
        try:
            dims, sizes = tuple(int(s) for s in shape), tuple(int(c) for c in chunksize)
            itemsize = int(value.dtype.itemsize)
        except (TypeError, ValueError, AttributeError):
            continue  # unknown (NaN) sizes
        nbytes = float(itemsize)
        for size in sizes:
            nbytes *= size
        count = functools.partial(xorwow_draws, value, numpy_means_device)
        draws: dict[str, int] = courteous("counting a chunk's random draws", count, {})
        found.append(ArrayChunks(name, dims, sizes, nbytes, draws))
    return sorted(found, key=lambda item: -item.chunk_bytes * _count(item))


def _count(array: ArrayChunks) -> int:
    total = 1
    for size, chunk in zip(array.shape, array.chunksize, strict=True):
        total *= -(-size // chunk)
    return total


def advise(
    split: TimeSplit,
    arrays: list[ArrayChunks],
    draw_costs: tuple[float, float] | None,
    *,
    cold: bool = False,
    kernel_shares: Mapping[str, str] | None = None,
) -> str | None:
    """The one line of advice for this split (at most ``MAX_ADVICE`` characters), or ``None`` when nothing
    measured points to a fix. ``cold``: the backend's first run here, whose start-up costs (imports, first CUDA
    use) would pass for per-task overhead: no chunk advice from it.

    ``draw_costs``: seconds to draw one chunk of normals with XORWOW (CuPy's default) and with Philox, measured
    on the GPU that ran the cell (``draw_seconds``). ``kernel_shares``: worker -> its GPU and what this kernel
    holds there ("GPU 0, 12 GiB"), for the workers whose GPU this kernel uses too (``kernel_on_workers``)."""
    by_function: dict[str, int] = {}
    for array in arrays:
        for function, count in array.xorwow_draws.items():
            by_function[function] = max(by_function.get(function, 0), count)
    draws = min(random_chunks(split), sum(by_function.values()))
    busy = split.seconds.get("compute", 0.0)
    if split.gpu and draws and draw_costs and busy > 0:
        xorwow, philox = draw_costs
        share = min(1.0, draws * max(xorwow - philox, 0.0) / busy)
        if share >= GENERATOR_SHARE:
            function = max(by_function, key=lambda name: by_function[name])
            return (
                f"{share:.0%} of GPU time set up XORWOW generators ({format_seconds(xorwow)} a chunk); Philox: "
                f"rs = {CALL}; x = rs.{function}(...)"
            )
    balance = None if cold else _balance(split, arrays, kernel_shares or {})
    if balance is not None:
        return balance
    if cold or split.share("compute") >= LOW_COMPUTE_SHARE or not split.tasks or not arrays:
        return None
    overhead = (split.seconds.get("scheduling", 0.0) + split.seconds.get("transfers", 0.0)) / split.tasks
    factor = chunk_advice.growth_factor(split.mean_task_s, overhead)
    biggest = arrays[0]
    grown = chunk_advice.grown_chunks(biggest.shape, biggest.chunksize, factor, min_chunks=2 * split.workers)
    if grown is None:
        return None
    return (
        f"tasks do {format_seconds(split.mean_task_s)} of work beside {format_seconds(overhead)} of overhead: "
        f"make {biggest.name} with chunks={chunk_advice.format_chunks(grown)} "
        f"(now {chunk_advice.format_chunks(biggest.chunksize)}, {format_bytes(biggest.chunk_bytes)})"
    )


def _balance(split: TimeSplit, arrays: list[ArrayChunks], kernel_shares: Mapping[str, str]) -> str | None:
    """On several GPUs: chunks too few for them, or that do not split evenly over them, with chunks that do; else
    one GPU that did most of the work, and why where it is known (this kernel uses that GPU too)."""
    gpus = split.workers
    if not split.gpu or gpus < 2 or not arrays:
        return None
    biggest = arrays[0]
    chunks = _count(biggest)
    better = chunk_advice.even_chunks(biggest.shape, biggest.chunksize, gpus)
    if better is not None and chunks < 8 * gpus:  # with many chunks a GPU, an uneven last round costs little
        each = _count(ArrayChunks(biggest.name, biggest.shape, better, 0.0)) // gpus
        what = (
            f"{chunks} chunk{'s' if chunks != 1 else ''} for {gpus} GPUs leave {gpus - chunks} idle"
            if chunks < gpus
            else f"{chunks} chunks do not split evenly over {gpus} GPUs"
        )
        return (
            f"{what}: make {biggest.name} with chunks={chunk_advice.format_chunks(better)} ({each} a GPU; now "
            f"{chunk_advice.format_chunks(biggest.chunksize)})"
        )
    busiest = lopsided(split)
    if busiest is None:
        return None
    worker, share = busiest
    shared = kernel_shares.get(worker)
    if shared is not None:
        return (
            f"{shared.split(',')[0]} did {share:.0%} of the work of {gpus} GPUs; this kernel uses it too "
            f"({shared}): %gpucluster free kernel gives its cache back"
        )
    return (
        f"one GPU did {share:.0%} of the work of {gpus} GPUs: another process may use it too "
        "(%gpucluster status shows who)"
    )


def lopsided(split: TimeSplit) -> tuple[str, float] | None:
    """(the worker, its share of the work) where one GPU of several did most of the work (``BUSIEST`` times its
    even share or more), else ``None``."""
    busiest = split.busiest()
    if split.workers < 2 or busiest is None or busiest[1] < BUSIEST / split.workers:
        return None
    return busiest


def kernel_on_workers(
    worker_gpus: Mapping[str, tuple[str, tuple[Any, ...]]], held: Mapping[str, tuple[int | None, bool]]
) -> dict[str, str]:
    """Worker -> "GPU 0, 12 GiB": the workers whose GPU this kernel holds memory on too (``worker_gpus``: the
    cluster's telemetry, worker -> (host, its GPUs); ``held``: this kernel's bytes by GPU UUID)."""
    found = {}
    for worker, (_, gpus) in worker_gpus.items():
        for gpu in gpus:
            size = held.get(getattr(gpu, "uuid", ""), (None, False))[0]
            if size:
                label = str(getattr(gpu, "label", "its GPU")).split(" \u00b7 ")[-1]
                found[worker] = f"{label}, {format_bytes(size)}"
    return found


def draw_seconds(elements: int) -> tuple[float, float]:
    """Seconds to draw ``elements`` float64 normals on this process's GPU with XORWOW and with Philox (a new
    ``RandomState`` each, as dask makes one per chunk; warm, best of three)."""
    import cupy
    from cupy.cuda import curand

    def once(method: int, seed: int) -> float:
        cupy.cuda.Device().synchronize()
        began = time.perf_counter()
        cupy.random.RandomState(seed, method=method).standard_normal(elements)
        cupy.cuda.Device().synchronize()
        return time.perf_counter() - began

    costs = []
    for method in (curand.CURAND_RNG_PSEUDO_XORWOW, curand.CURAND_RNG_PSEUDO_PHILOX4_32_10):
        once(method, 1)
        costs.append(min(once(method, seed) for seed in (2, 3, 4)))
    return costs[0], costs[1]


@functools.cache
def local_draw_seconds(device: int, elements: int) -> tuple[float, float] | None:
    """``draw_seconds`` on ``device`` in this process, measured once per chunk size."""
    return courteous("timing random draws on the GPU", functools.partial(_draw_seconds_on, device, elements), None)


def _draw_seconds_on(device: int, elements: int) -> tuple[float, float]:
    import cupy

    with cupy.cuda.Device(device):
        return draw_seconds(elements)


_cluster_costs: dict[tuple[int, str, int], tuple[float, float] | None] = {}
_asked: dict[tuple[int, tuple[str, ...], int], tuple[int, str, int]] = {}  # (client, workers, size) -> the above


def cluster_draw_seconds(
    client: Client, elements: int, workers: Iterable[str] | None = None
) -> tuple[float, float] | None:
    """``draw_seconds`` on one GPU worker of the cluster, measured once per worker and chunk size (the cluster's
    workers are asked for once per client, workers and chunk size: not at every cell)."""
    asked = (id(client), tuple(sorted(workers or ())), elements)
    if asked in _asked:
        return _cluster_costs.get(_asked[asked])
    try:
        candidates = sorted(workers) if workers else sorted(client.scheduler_info(n_workers=-1)["workers"])
    except (OSError, RuntimeError, KeyError):  # the scheduler's comm failed or timed out; the client's loop is gone
        return None
    if not candidates:
        return None
    key = (id(client), candidates[0], elements)
    _asked[asked] = key
    if key not in _cluster_costs:
        ask = functools.partial(_draw_seconds_of, client, elements, candidates[0])
        _cluster_costs[key] = courteous("timing random draws on a worker", ask, None)
    return _cluster_costs[key]


def _draw_seconds_of(client: Client, elements: int, worker: str) -> tuple[float, float]:
    answer = client.run(draw_seconds, elements, workers=[worker])
    xorwow, philox = next(iter(answer.values()))
    return float(xorwow), float(philox)


class RanOn(Protocol):
    """What the advice reads of the backend a cell ran on (a ``BackendPlan``)."""

    @property
    def client(self) -> Client | None: ...
    @property
    def gpu_indices(self) -> tuple[int, ...]: ...
    @property
    def annotations(self) -> dict[str, Any]: ...
    @property
    def remote_chunks(self) -> bool: ...


def _kernel_shares() -> dict[str, str]:
    """The cluster's workers whose GPU this kernel holds memory on too (for the advice); none where unknown."""
    from gpu_magics.cluster.control import queries

    reports = queries.telemetry()
    if reports is None:
        return {}
    return courteous(
        "reading which GPUs this kernel shares with the workers",
        lambda: kernel_on_workers(reports.worker_gpus(), queries.kernel_held_by_uuid()),
        {},
    )


def advice_for(
    shell: InteractiveShell, names: Iterable[str], plan: RanOn, split: TimeSplit, *, cold: bool = False
) -> str | None:
    """The one line of advice for the split (``advice``) about the arrays ``names`` hold, measuring the GPU's
    random draws only when the cell drew random chunks on a GPU; ``cold``: the backend's first run here."""
    arrays = arrays_made(shell.user_ns, sorted(names), plan.remote_chunks)
    costs = None
    drawn = [array for array in arrays if array.xorwow_draws]
    if split.gpu and drawn and random_chunks(split):
        elements = math.prod(drawn[0].chunksize)
        if plan.client is not None:
            costs = cluster_draw_seconds(plan.client, elements, plan.annotations.get("workers"))
        elif plan.gpu_indices:
            costs = local_draw_seconds(plan.gpu_indices[0], elements)
    shares: dict[str, str] = {}
    if plan.client is not None and split.gpu and lopsided(split) is not None:
        shares = _kernel_shares()  # NVML's process lists: read only where one GPU did most of the work
    return courteous(
        "advice on the cell's time",
        lambda: advise(split, arrays, costs, cold=cold, kernel_shares=shares),
        None,
    )
