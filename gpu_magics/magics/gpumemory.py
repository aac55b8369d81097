"""``%gpumemory``: what this notebook holds on GPUs, by the names that hold it, biggest first.

The report: what this kernel holds on each GPU by name (``spmd.rank.held_by_name``, which the ranks use too), what no
name holds there (arrays only objects out of reach hold, what the pools cache, the CUDA context: from this kernel's own
figures, ``kernel_report``), and what the SPMD ranks' variables hold (each rank asked the same), and the data the
cluster in use keeps for this kernel, by the variable that holds it (persisted collections and futures: their keys'
sizes and workers, from the scheduler). Each row says how to give it back.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from IPython.core.magic import Magics, line_magic, magics_class

from gpu_magics.arrays.caps import notebook, over_cap
from gpu_magics.arrays.caps.cap import CapError
from gpu_magics.spmd.rank.held_by_name import Held, Rest, from_rows, held_by_name, rank_rest, rest_of, roots
from gpu_magics.text.argparsing import MagicArgumentParser, positive_int
from gpu_magics.text.errors import LineError, said_in_one_line
from gpu_magics.text.units import format_bytes

DEFAULT_TOP = 20
PANEL_NAMES = 5  # the names the side panel's notebook row lists under each GPU (%gpumemory lists them all)
PANEL_ITEMS = 50  # a container's items the record's search looks at after each cell (%gpumemory's looks at more)


def _parser() -> MagicArgumentParser:
    parser = MagicArgumentParser("%gpumemory")
    parser.add_argument("--top", type=positive_int, default=DEFAULT_TOP)
    parser.add_argument("--drop-traceback", action="store_true")
    parser.add_argument("--cap", metavar="SIZE")
    return parser.described(globals())


@magics_class
class MemoryMagics(Magics):
    """What holds GPU memory in this notebook."""

    @line_magic
    @said_in_one_line
    def gpumemory(self, line: str = "") -> None:
        """List what this notebook holds on GPUs, by the names that hold it, biggest first.

        Usage::

            %gpumemory                   every GPU this kernel holds memory on, and the cluster's data
            %gpumemory --top 5           five names per GPU (default 20)
            %gpumemory --drop-traceback  let go of the last error's frames (they hold their arrays)
            %gpumemory --cap 8GiB        cap this notebook's memory on each GPU (or 25%; off lifts it)

        For this kernel, by GPU: its variables, ``Out``'s entries and the last error's frames that hold CuPy
        arrays, PyTorch tensors (a module's parameters and buffers, an optimizer's state), JAX arrays or anything
        with ``__cuda_array_interface__``, one level into lists, dicts and objects; each allocation counted once,
        for the first name that reaches it (the others are listed beside it). Then what no name holds: arrays only
        objects out of reach hold, what CuPy's and PyTorch's pools cache, the CUDA context and libraries (NVML's
        figure for this kernel, less the rest). For the cluster in use: the persisted collections and futures of
        this kernel's variables, with their size and workers. Each row says how to give it back.

        ``--cap`` caps what this notebook holds on each GPU, at most the server's cap
        (``c.GpuMagicsServer.memory_cap``): the kernel, its cluster's workers and its SPMD ranks share it equally,
        each through its allocators' own limits (CuPy's pool, PyTorch's fraction, JAX's fraction, RMM's pool on the
        workers). A cell that would pass it fails with one line. Memory taken outside those allocators is not
        stopped.
        """
        args = _parser().parse_line(line)
        if args.cap is not None:
            print(_set_cap(args.cap))
            return
        if args.drop_traceback:
            for name in ("last_traceback", "last_value", "last_type", "last_exc"):
                if hasattr(sys, name):
                    setattr(sys, name, None)
            print("%gpumemory: the last error's frames are let go (what only they held is freed)")
            return
        capped = notebook.describe()
        print(("%gpumemory: " + capped + "\n" if capped else "") + text(read_report(self.shell), args.top))


def _set_cap(wanted: str) -> str:
    """The user's own cap, and the line that says what binds now."""
    try:
        notebook.set_user_cap(wanted)
    except CapError as error:
        raise LineError(f"%gpumemory --cap: {error}") from None
    capped = notebook.describe()
    if capped is not None:
        return f"%gpumemory: {capped}"
    mine = notebook.user_cap()
    if mine is None:
        return "%gpumemory: no memory cap binds this notebook"
    return f"%gpumemory: cap {mine.text} a GPU (yours); no GPU is visible here, so nothing in this kernel is limited"


def install_cap(shell: Any) -> None:
    """The kernel keeps within its share of the notebook's memory cap, and a cell the cap stops says so in one line
    with the names that hold the memory (``%load_ext``)."""
    over_cap.install(shell, lambda indices: panel_names(shell, indices))
    notebook.apply_before_the_next_cell(shell)


def uninstall_cap(shell: Any) -> None:
    over_cap.uninstall(shell)  # the limits stay: unloading the extension does not lift the server's cap
    notebook.apply_before_the_next_cell(shell, undo=True)


DROP_TRACEBACK = "%gpumemory --drop-traceback"


@dataclass
class GpuPart:
    """One GPU of this kernel: NVML's figure for it, the names' rows and the rest."""

    index: int
    name: str
    nvml: int | None
    rows: list[Held] = field(default_factory=list)
    rest: list[Rest] = field(default_factory=list)


@dataclass(frozen=True)
class ClusterRow:
    """Data the cluster keeps for a variable: its keys in memory on the workers."""

    name: str
    what: str
    size: int
    keys: int
    workers: tuple[str, ...]


@dataclass
class Report:
    gpus: list[GpuPart]
    elsewhere: list[Held]  # names holding memory on a device this kernel's figures do not list
    cluster: list[ClusterRow]
    cluster_name: str | None = None
    ranks: dict[int, list[Held]] = field(default_factory=dict)  # what each SPMD rank's variables hold
    rank_rest: dict[int, tuple[int | None, list[Rest]]] = field(default_factory=dict)  # NVML's figure, the rest
    workers: list[tuple[str, int | None, int, list[Rest]]] = field(default_factory=list)  # name, NVML, data, rest


def read_report(shell: Any) -> Report:
    """Everything above for the kernel ``shell`` runs in (its figures read now)."""
    from gpu_magics.cluster.control import queries
    from gpu_magics.cluster.records import kernel_report

    out = shell.user_ns.get("Out")
    pairs = list(roots(shell.user_ns, out if isinstance(out, dict) else None, _last()))
    rows = held_by_name(iter(pairs))
    read = kernel_report.kernel_memory(fresh=True)
    gpus = [GpuPart(gpu.index, gpu.name, gpu.held.total) for gpu in read]
    by_index = {gpu.index: gpu for gpu in gpus}
    elsewhere: list[Held] = []
    for row in rows:
        device = device_of(row, list(by_index))
        target = by_index.get(device) if device is not None else None
        (target.rows if target is not None else elsewhere).append(row)
    for gpu, held in zip(gpus, read, strict=True):
        gpu.rest = _rest(gpu, held.held)
    current = queries.active()
    data_on: dict[str, int] = {}  # worker address -> the data of the kernel's variables there
    cluster = _cluster_rows(pairs, current.client, data_on) if current is not None else []
    rank_calls = queries.rank_park()
    asked = {} if rank_calls is None else rank_calls.held()
    processes = kernel_report.nvml_processes() if asked else {}
    ranks, rest = {}, {}
    for index, (held, pools, pid) in asked.items():
        nvml = _nvml_of(processes, pid)
        unnamed = rank_rest(sum(row.size for row in from_rows(held)), pools, nvml)
        if held or unnamed:  # a CPU rank, or one that holds nothing on a GPU, is left out
            ranks[index], rest[index] = from_rows(held), (nvml, unnamed)
    name = current.name if current is not None else None
    return Report(gpus, elsewhere, cluster, name, ranks, rest, _workers(queries.telemetry(), data_on))


def _nvml_of(processes: dict[str, Any], pid: int | None) -> int | None:
    """What NVML lists for ``pid`` on every GPU together (``None``: it lists none, as where its pids are not ours)."""
    found = [p.used_memory for listed in processes.values() for p in listed or () if p.pid == pid and pid is not None]
    return sum(size or 0 for size in found) if found else None


def _workers(telemetry: Any, data_on: dict[str, int]) -> list[tuple[str, int | None, int, list[Rest]]]:
    """Each GPU worker's memory, as it reports it, beyond the data of the kernel's variables it keeps."""
    found = []
    for address, (label, gpus) in sorted((telemetry.worker_gpus_alone() if telemetry else {}).items()):
        for gpu in gpus:
            if gpu.process_memory:
                data = data_on.get(address, 0)
                cached = [Rest("cached by its pool", gpu.cached_memory or 0, "%gpucluster free workers")]
                rest = rest_of(data, gpu.process_memory, gpu.array_memory, cached, unnamed_how="results no variable "
                               "holds, tasks' data", context_how="%gpucluster stop")  # fmt: skip
                found.append((f"{address} ({gpu.label or label})", gpu.process_memory, data, rest))
    return found


def panel_names(shell: Any, indices: list[int]) -> dict[int, list[dict[str, Any]]]:
    """What the side panel's notebook row lists under each GPU where this kernel holds memory (by the kernel's
    device ``indices``): its biggest names (name, what, bytes, how to give it back), at most ``PANEL_NAMES``. Read
    in the record's thread after each cell, from a copy of the namespace, looking at ``PANEL_ITEMS`` of a
    container's items (the thread holds the GIL while it looks); a name whose device is not known goes to the
    kernel's one GPU, where it has one."""
    out = shell.user_ns.get("Out")
    pairs = roots(dict(shell.user_ns), dict(out) if isinstance(out, dict) else None, _last())
    rows = held_by_name(pairs, most_items=PANEL_ITEMS)
    found: dict[int, list[dict[str, Any]]] = {}
    for row in rows:
        device = device_of(row, indices)
        if device is None or device not in indices or len(found.setdefault(device, [])) >= PANEL_NAMES:
            continue
        what = f"{row.what} {row.description}"
        found[device].append({"name": row.name, "what": what, "bytes": row.size, "give_back": give_back(row.name)})
    return found


def device_of(row: Held, indices: list[int]) -> int | None:
    """The GPU a row's memory is on (by the kernel's device index): its device, or where its device is not known
    (an array through the CUDA array interface), the one GPU the kernel holds memory on, if it is one."""
    if row.devices:
        return min(row.devices)
    return indices[0] if len(indices) == 1 else None


def install_panel_names(shell: Any) -> None:
    """The kernel's record lists the names that hold its GPU memory, for the side panel (``%load_ext``)."""
    from gpu_magics.cluster.records import kernel_report

    kernel_report.names_by_gpu = lambda indices: panel_names(shell, indices)


def uninstall_panel_names(shell: Any) -> None:
    from gpu_magics.cluster.records import kernel_report

    kernel_report.names_by_gpu = None


def _last() -> Any:
    return getattr(sys, "last_traceback", None)


def _rest(gpu: GpuPart, held: Any) -> list[Rest]:
    """What no name holds on ``gpu``: CuPy arrays out of reach, CuPy's and PyTorch's caches, the context."""
    named_cupy = sum(row.size for row in gpu.rows if row.what == "CuPy array")
    cached = [
        Rest("cached by CuPy's pool", held.cached or 0, "cupy.get_default_memory_pool().free_all_blocks()"),
        Rest("cached by PyTorch", _torch_cached(gpu.index), "torch.cuda.empty_cache()"),
    ]
    return rest_of(named_cupy, gpu.nvml, held.arrays, cached, unnamed_what="CuPy arrays no name reaches",
                   unnamed_how="held by objects out of reach: closures, caches, other threads",
                   context_how="restart the kernel",
                   named_elsewhere=sum(row.size for row in gpu.rows) - named_cupy)  # fmt: skip


def _torch_cached(index: int) -> int:
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_initialized():
        return 0
    return max(0, int(torch.cuda.memory_reserved(index)) - int(torch.cuda.memory_allocated(index)))


def _cluster_rows(pairs: Iterable[tuple[str, Any]], client: Any, data_on: dict[str, int]) -> list[ClusterRow]:
    """The variables that hold persisted collections or futures of ``client``, with what their keys take;
    ``data_on`` gets what they keep on each worker (by address)."""
    dask = sys.modules.get("dask")
    distributed = sys.modules.get("distributed")
    if dask is None or distributed is None:
        return []
    wanted: list[tuple[str, str, list[Any]]] = []
    for name, value in pairs:
        if isinstance(value, distributed.Future):
            wanted.append((name, "future", [value.key]))
        elif dask.is_dask_collection(value):
            keys = list(_flat(value.__dask_keys__()))
            wanted.append((name, f"{type(value).__module__.split('.')[0]}.{type(value).__name__}", keys))
    if not wanted:
        return []
    every = list({key for _, _, keys in wanted for key in keys})
    sizes = client.run_on_scheduler(_keys_in_memory, keys=every)
    rows, seen = [], set()
    for name, kind, keys in wanted:
        mine = [key for key in keys if key in sizes and key not in seen]
        seen.update(mine)
        if mine:
            workers = tuple(sorted({w for key in mine for w in sizes[key][1]}))
            rows.append(ClusterRow(name, kind, sum(sizes[key][0] for key in mine), len(mine), workers))
            for key in mine:
                for address in sizes[key][2]:
                    data_on[address] = data_on.get(address, 0) + sizes[key][0]
    return sorted(rows, key=lambda row: -row.size)


def _flat(keys: Any) -> Iterable[Any]:
    if isinstance(keys, list):
        for item in keys:
            yield from _flat(item)
    else:
        yield keys


def _keys_in_memory(dask_scheduler: Any, keys: list[Any]) -> dict[Any, tuple[int, list[str], list[str]]]:
    """On the scheduler: each key held in memory, its bytes and the workers that hold it (names, addresses)."""
    found = {}
    for key in keys:
        task = dask_scheduler.tasks.get(key)
        if task is not None and task.state == "memory":
            holders = list(task.who_has)
            found[key] = (int(task.nbytes), [str(w.name) for w in holders], [str(w.address) for w in holders])
    return found


def give_back(name: str) -> str:
    """How to let go of what ``name`` holds."""
    if name.startswith("Out["):
        return "%reset -f out"
    if name.startswith("the last error's frame"):
        return DROP_TRACEBACK
    root = name.split("[", 1)[0].split(".", 1)[0]
    return f"del {root}"


def text(report: Report, top: int) -> str:
    """The report as lines, biggest first, ``top`` names per GPU."""
    lines = []
    for gpu in report.gpus:
        named = sum(row.size for row in gpu.rows)
        nvml = f"NVML lists {format_bytes(gpu.nvml)} for this kernel" if gpu.nvml is not None else "NVML lists none"
        lines.append(f"GPU {gpu.index} ({gpu.name}): {nvml}; its names hold {format_bytes(named)}")
        lines.extend(_rows(gpu.rows, top))
        for item in gpu.rest:
            lines.append(f"  {item.what:<55} {format_bytes(item.size):>10}   {item.how}")
    if report.elsewhere:
        lines.append("GPU data on a device this kernel's readings do not show (or whose device is not known):")
        lines.extend(_rows(report.elsewhere, top))
    for index, held in sorted(report.ranks.items()):
        rank_nvml, unnamed = report.rank_rest.get(index, (None, []))
        listed = f"; NVML lists {format_bytes(rank_nvml)} for its process" if rank_nvml is not None else ""
        lines.append(f"In SPMD rank {index} (its variables: del them in a %%gpurun spmd cell{listed}):")
        lines.extend(_rows(held, top))
        lines.extend(f"  {item.what:<55} {format_bytes(item.size):>10}   {item.how}" for item in unnamed)
    if report.cluster:
        lines.append(f"On the workers of {report.cluster_name!r} (data they keep for this kernel's variables):")
        for cluster_row in report.cluster[:top]:
            workers = ", ".join(cluster_row.workers[:3]) + (" ..." if len(cluster_row.workers) > 3 else "")
            lines.append(
                f"  {cluster_row.name:<20} {cluster_row.what + f' ({cluster_row.keys} keys)':<34} "
                f"{format_bytes(cluster_row.size):>10}   del {cluster_row.name.split('[', 1)[0]}   on {workers}"
            )
        if len(report.cluster) > top:
            more = report.cluster[top:]
            lines.append(f"  ... {len(more)} more: {format_bytes(sum(row.size for row in more))} (--top N)")
    for worker, held_there, data, worker_rest in report.workers:
        said = f"holds {format_bytes(held_there)} (NVML), of it the data above {format_bytes(data)}"
        lines.append(f"Worker {worker} {said}:")
        lines.extend(f"  {item.what:<55} {format_bytes(item.size):>10}   {item.how}" for item in worker_rest)
    if not lines:
        return "%gpumemory: this kernel holds nothing on a GPU, nor do its SPMD ranks, and no cluster keeps data for it"
    return "\n".join(lines)


def _rows(rows: list[Held], top: int) -> list[str]:
    lines = [_row_line(row) for row in rows[:top]]
    if len(rows) > top:
        more = rows[top:]
        lines.append(f"  ... {len(more)} more names: {format_bytes(sum(row.size for row in more))} (--top N)")
    return lines


def _row_line(row: Held) -> str:
    also = f" (also {', '.join(row.also[:3])}{' ...' if len(row.also) > 3 else ''})" if row.also else ""
    what = f"{row.what} {row.description}"
    return f"  {row.name:<20} {what:<34} {format_bytes(row.size):>10}   {give_back(row.name)}{also}"
