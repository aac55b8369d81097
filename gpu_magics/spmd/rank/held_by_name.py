"""GPU data found by the names that reach it: the user's variables, ``Out``'s entries and the last traceback's
frames; one level into lists, tuples, dicts and plain objects. CuPy arrays, PyTorch tensors on a GPU (a module's
parameters and buffers, an optimizer's state, as one row each), JAX arrays on a GPU, and anything else that offers
``__cuda_array_interface__``. Each allocation is counted once, for the first name that reaches it (views share their
base's); the other names are listed beside it. Libraries are only looked up in ``sys.modules``: nothing is imported
and nothing runs on a GPU.
"""

from __future__ import annotations

import math
import sys
import types
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

MOST_ITEMS = 1000  # a container's items looked at (a list of a million floats is not searched)
_SKIPPED = frozenset({"In", "Out", "exit", "quit", "get_ipython", "_ih", "_oh", "_dh"})
_NOT_DATA = (types.ModuleType, type, types.FunctionType, types.BuiltinFunctionType, types.MethodType)
_TYPE_SIZES = {"b": 1, "B": 1, "?": 1, "e": 2, "f": 4, "d": 8, "i": 4, "u": 4}


@dataclass(frozen=True)
class Piece:
    """One allocation reached from a name: its identity, bytes, device and what it is."""

    key: tuple[str, int]  # (library, address): one allocation, however many arrays view it
    size: int
    device: int | None
    library: str


@dataclass
class Held:
    """What one name holds on GPUs (what no earlier name holds)."""

    name: str
    what: str
    description: str
    size: int = 0
    devices: set[int] = field(default_factory=set)
    also: list[str] = field(default_factory=list)  # other names that reach the same memory
    pieces: int = 0


def roots(
    namespace: dict[str, Any], out: dict[int, Any] | None, traceback: types.TracebackType | None
) -> Iterator[tuple[str, Any]]:
    """The names to look from, the plainest first: variables, then ``Out[N]``, then the last traceback's frames."""
    for name, value in namespace.items():
        if name in _SKIPPED or _ipython_name(name) or isinstance(value, _NOT_DATA):
            continue
        yield name, value
    for number, value in sorted((out or {}).items()):
        yield f"Out[{number}]", value
    frame_tb = traceback
    while frame_tb is not None:
        frame = frame_tb.tb_frame
        for name, value in frame.f_locals.items():
            if not name.startswith("__"):
                yield f"the last error's frame {frame.f_code.co_name}(): {name}", value
        frame_tb = frame_tb.tb_next


def _ipython_name(name: str) -> bool:
    """IPython's own names: ``_i``, ``_ii3``, ``_3``, ``__``... (``_`` and its like are ``Out``'s entries again)."""
    return name.startswith("_")


def held_by_name(pairs: Iterator[tuple[str, Any]], most_items: int = MOST_ITEMS) -> list[Held]:
    """Every name that holds GPU memory no earlier name holds, biggest first; names reaching only memory held
    already are listed as ``also`` on the row that holds it. ``most_items``: a container's items looked at."""
    owner: dict[tuple[str, int], Held] = {}
    rows: list[Held] = []
    for name, value in pairs:
        for row_name, what, description, pieces in _parts(name, value, most_items):
            row = Held(row_name, what, description)
            for piece in pieces:
                first = owner.get(piece.key)
                if first is None:
                    owner[piece.key] = row
                    row.size += piece.size
                    row.pieces += 1
                    if piece.device is not None:
                        row.devices.add(piece.device)
                elif first is not row and row_name not in first.also:
                    first.also.append(row_name)
            if row.size:
                rows.append(row)
    return sorted(rows, key=lambda row: -row.size)


def as_rows(rows: list[Held]) -> list[dict[str, Any]]:
    """The rows as plain values (a rank's answer to the kernel)."""
    return [
        {"name": row.name, "what": row.what, "description": row.description, "size": row.size,
         "devices": sorted(row.devices), "also": list(row.also)}
        for row in rows
    ]  # fmt: skip


def from_rows(rows: list[dict[str, Any]]) -> list[Held]:
    """``as_rows`` read back."""
    return [
        Held(str(row["name"]), str(row["what"]), str(row["description"]), int(row["size"]),
             {int(device) for device in row.get("devices") or ()}, [str(name) for name in row.get("also") or ()])
        for row in rows
    ]  # fmt: skip


def _parts(name: str, value: Any, most_items: int) -> Iterator[tuple[str, str, str, list[Piece]]]:
    """The rows ``value`` gives under ``name``: itself, or its items and attributes one level down."""
    found = _gpu_data(value)
    if found is not None:
        yield (name, *found)
        return
    for suffix, item in _children(value, most_items):
        inner = _gpu_data(item)
        if inner is not None:
            yield (f"{name}{suffix}", *inner)


def _children(value: Any, most_items: int) -> Iterator[tuple[str, Any]]:
    if isinstance(value, (list, tuple)):
        for index, item in enumerate(value[:most_items]):
            yield f"[{index}]", item
    elif isinstance(value, dict):
        for index, (key, item) in enumerate(value.items()):
            if index >= most_items:
                break
            if isinstance(key, (str, int)):
                yield f"[{key!r}]", item
    elif hasattr(value, "__dict__") and not isinstance(value, (types.FunctionType, types.MethodType)):
        attributes = getattr(value, "__dict__", None)
        if isinstance(attributes, dict):
            for index, (key, item) in enumerate(attributes.items()):
                if index >= most_items:
                    break
                if isinstance(key, str) and not key.startswith("__"):
                    yield f".{key}", item


def _gpu_data(value: Any) -> tuple[str, str, list[Piece]] | None:
    """``(kind, description, pieces)`` where ``value`` is GPU data (or a module or optimizer holding some)."""
    cupy = sys.modules.get("cupy")
    if cupy is not None and isinstance(value, cupy.ndarray):
        memory = value.data.mem
        piece = Piece(("cuda", int(memory.ptr)), int(memory.size), int(value.device.id), "cupy")
        return "CuPy array", _shape(value.shape, value.dtype), [piece]
    torch = sys.modules.get("torch")
    if torch is not None:
        found = _torch_data(torch, value)
        if found is not None:
            return found
    jax = sys.modules.get("jax")
    if jax is not None and isinstance(value, getattr(jax, "Array", ())):
        return _jax_data(value)
    interface = getattr(type(value), "__cuda_array_interface__", None)
    if interface is not None:
        return _interface_data(value)
    return None


def _torch_data(torch: Any, value: Any) -> tuple[str, str, list[Piece]] | None:
    if isinstance(value, torch.Tensor):
        if not value.is_cuda:
            return None
        return "PyTorch tensor", _shape(tuple(value.shape), value.dtype), [_storage(value)]
    if isinstance(value, torch.nn.Module):
        tensors = [t for t in [*value.parameters(), *value.buffers()] if t.is_cuda]
        if not tensors:
            return None
        return "PyTorch module", f"{len(tensors)} tensors (parameters, buffers)", [_storage(t) for t in tensors]
    if isinstance(value, torch.optim.Optimizer):
        tensors = [t for state in value.state.values() for t in state.values() if torch.is_tensor(t) and t.is_cuda]
        if not tensors:
            return None
        return "optimizer state", f"{len(tensors)} tensors", [_storage(t) for t in tensors]
    return None


def _storage(tensor: Any) -> Piece:
    storage = tensor.untyped_storage()
    return Piece(("cuda", int(storage.data_ptr())), int(storage.nbytes()), tensor.device.index, "torch")


def _jax_data(value: Any) -> tuple[str, str, list[Piece]] | None:
    devices = list(value.devices())
    if not devices or devices[0].platform != "gpu":
        return None
    try:
        address = int(value.unsafe_buffer_pointer())
    except (AttributeError, RuntimeError, ValueError):  # sharded over several devices: one row, no dedup
        address = id(value)
    return (
        "JAX array",
        _shape(value.shape, value.dtype),
        [Piece(("jax", address), int(value.nbytes), devices[0].id, "jax")],
    )


def _interface_data(value: Any) -> tuple[str, str, list[Piece]] | None:
    try:
        interface = value.__cuda_array_interface__
        shape = tuple(int(side) for side in interface["shape"])
        typestr = str(interface["typestr"])
        address = int(interface["data"][0])
    except (AttributeError, KeyError, TypeError, ValueError, IndexError):
        return None
    itemsize = int(typestr[2:]) if typestr[2:].isdigit() else _TYPE_SIZES.get(typestr[1:2], 1)
    size = math.prod(shape) * itemsize
    what = type(value).__name__
    return what, _shape(shape, typestr), [Piece(("cuda", address), size, None, "interface")]


def _shape(shape: tuple[int, ...], dtype: object) -> str:
    return f"{' x '.join(str(side) for side in shape) or 'scalar'} {dtype}"


def pool_figures() -> dict[str, int]:
    """This process's pools on its current GPU (a rank's, for ``%gpumemory``): PyTorch's allocated and reserved
    bytes, CuPy's pool's used and held bytes, where the library is in use."""
    found: dict[str, int] = {}
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        found["torch_allocated"] = int(torch.cuda.memory_allocated())
        found["torch_reserved"] = int(torch.cuda.memory_reserved())
    cupy = sys.modules.get("cupy")
    if cupy is not None:
        pool = cupy.get_default_memory_pool()
        found["cupy_used"], found["cupy_held"] = int(pool.used_bytes()), int(pool.total_bytes())
    return found


@dataclass(frozen=True)
class Rest:
    """What no name holds in one process on one GPU, by kind, with how to give it back."""

    what: str
    size: int
    how: str


def rest_of(
    named: int,
    nvml: int | None,
    in_use: int | None,
    cached: list[Rest],
    *,
    unnamed_how: str,
    context_how: str,
    unnamed_what: str = "arrays no name reaches",
    named_elsewhere: int = 0,
) -> list[Rest]:
    """What a process holds on a GPU beyond its names' ``named`` bytes: arrays in use (``in_use``, its pools'
    figure) that no name reaches, what its pools cache, and the rest of NVML's figure (its CUDA context and
    libraries), so that the names and these add up to NVML's figure. ``named_elsewhere``: names' bytes outside
    ``in_use``'s pools (the kernel's PyTorch tensors beside CuPy's figure)."""
    rest = []
    if in_use is not None and in_use > named:
        rest.append(Rest(unnamed_what, in_use - named, unnamed_how))
    rest.extend(item for item in cached if item.size > 0)
    if nvml is not None:
        accounted = named + named_elsewhere + sum(item.size for item in rest)
        if nvml > accounted:
            rest.append(Rest("the CUDA context, libraries and the rest", nvml - accounted, context_how))
    return rest


def rank_rest(named: int, pools: dict[str, int], nvml: int | None) -> list[Rest]:
    """``rest_of`` for an SPMD rank, from its pools' figures (``pool_figures``)."""
    in_use = pools.get("torch_allocated", 0) + pools.get("cupy_used", 0) if pools else None
    where = "in a %%gpurun spmd cell"
    cached = [
        Rest("cached by PyTorch", pools.get("torch_reserved", 0) - pools.get("torch_allocated", 0),
             f"torch.cuda.empty_cache() {where}"),
        Rest("cached by CuPy's pool", pools.get("cupy_held", 0) - pools.get("cupy_used", 0),
             f"cupy.get_default_memory_pool().free_all_blocks() {where}"),
    ]  # fmt: skip
    return rest_of(
        named, nvml, in_use, cached, unnamed_how="held by objects out of reach", context_how="ends with the rank"
    )
