"""The configurable settings: the magics' traitlets (``%config``), the server extension's (``c.GpuMagicsServer``)
and the package's dask config keys (``gpu-magics.*``), each with its default and help."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from reference_pages.markdown import HEADER, code, table


@dataclass(frozen=True)
class DaskKey:
    """A dask config key of this package; its default is what ``reader`` returns where the config leaves it."""

    key: str
    reader: str  # "module:function": the package's own reading of the key
    help: str


# tests/test_docs_reference.py checks that these are all the ``gpu-magics.*`` keys the package reads.
DASK_KEYS = (
    DaskKey(
        "gpu-magics.runs-per-slot",
        "gpu_magics.gpurun.graphs.grouping:runs_per_slot",
        "On a cluster, a reduction's chunk tasks run as this many tasks per GPU (or CPU worker thread), each "
        "computing its chunks one after the other; 0 leaves dask's graph as it is.",
    ),
    DaskKey(
        "gpu-magics.fold-reductions",
        "gpu_magics.gpurun.graphs.grouping:fold_reductions",
        "On a cluster, a whole-array reduction's runs each combine their own chunks, and its aggregate reads one "
        "partial result per run; False keeps dask's reduction tree.",
    ),
    DaskKey(
        "gpu-magics.aggregate-in-kernel",
        "gpu_magics.gpurun.graphs.kernel_tail:enabled",
        "On a cluster, the kernel gathers a reduction's partial results and aggregates them itself (the same "
        "bits); False aggregates on a worker.",
    ),
)

# The environment variables the package reads (tests/test_docs_reference.py checks that these are all it names):
# (name, who sets it, what it does).
ENVIRONMENT = (
    ("GPU_MAGICS_SOURCE", "you", "Where GPU readings come from: unset or `nvml` for real GPUs; `fake:N` for N "
     "simulated GPUs (panels, `%gpumonitor`, the inventory, the server's `/metrics`: demos and tests), "
     "`fake:spec.json` for GPUs as a spec file describes them. Simulated GPUs never run cells."),
    ("GPU_MAGICS_CHECKPOINT_FAIL", "you", "With simulated GPUs (`GPU_MAGICS_SOURCE=fake:N`), the park's stand-in "
     "for the CUDA driver refuses the steps named here (`checkpoint:PID`, `restore:PID`, comma-separated; "
     "`@PATH`: the steps that file names, while it exists), so a refused park or resume can be tried without a "
     "GPU."),
    ("GPU_MAGICS_SIMULATED_HOST_BYTES", "you", "With simulated GPUs, the bytes of host memory the park's stand-in "
     "says are available (read in the kernel; default: what the host has), so a park that host memory refuses can be "
     "tried without a GPU."),
    ("GPU_MAGICS_PARKABLE_ARRAYS", "you", "`1`: once the extension is loaded, the kernel's CuPy arrays of 8 MiB "
     "and more are allocated through CUDA's virtual memory calls, so that a park copies them to host memory at the "
     "bus's pace and the driver checkpoints only the kernel's CUDA context (set before the kernel imports CuPy; off "
     "by default: a first cell's new blocks cost more to make)."),
    ("GPU_MAGICS_RUNTIME_DIR", "you", "Where kernels and servers keep their discovery records (the clusters the side "
     "panel and `/metrics` list); default: Jupyter's runtime directory."),
    ("GPU_MAGICS_DEVICE_ARRAYS", "you", "The device array module a cluster's chunks are made with on the workers "
     "(default `cupy`)."),
    ("GPU_MAGICS_MEMORY_CAP", "gpu-magics", "In a kernel the server started: the server's memory cap per notebook "
     "and GPU (`GpuMagicsServer.memory_cap`), which the kernel keeps to; set by an admin where kernels start without "
     "the server."),
    ("GPU_MAGICS_MEMORY_SHARE", "gpu-magics", "In an SPMD rank: its share of the notebook's memory cap, "
     "`BYTES/GPU_BYTES`, set as its allocators' limits when it starts."),
    ("GPU_MAGICS_FAKE_STATE", "gpu-magics", "A simulated GPU's memory file, shared by a `fake` source's processes."),
    ("GPU_MAGICS_WORKER_LOG", "gpu-magics", "Where the workers' launcher sends its standard error."),
    ("GPU_MAGICS_SPMD_DEVICE", "gpu-magics", "In a rank process: `gpu` or `cpu`, what the rank computes on."),
    ("GPU_MAGICS_SPMD_WORKER", "gpu-magics", "In a rank process: its worker's address (where `spmd.shards` reads)."),
    ("GPU_MAGICS_SPMD_ENV", "gpu-magics", "In a rank process: the names of its torchrun environment, put back before "
     "every cell."),
    ("GPU_MAGICS_SPMD_DEFAULTED", "gpu-magics", "In a rank process: the variables gpu-magics gave a default."),
)  # fmt: skip

MAGICS_SETTINGS = (
    "gpu_magics.magics.gpurun:GpuMagics",
    "gpu_magics.magics.gpucluster:ClusterMagics",
)
SERVER_SETTINGS = "gpu_magics.server.config:GpuMagicsServer"


def resolve(spec: str) -> Any:
    module, _, attribute = spec.partition(":")
    return getattr(importlib.import_module(module), attribute)


def trait_type(trait: Any) -> str:
    values = getattr(trait, "values", None)
    if values:
        return " or ".join(code(value) for value in values)
    words = {"Bool": "true or false", "Float": "number", "Int": "whole number", "Unicode": "text"}
    kind = type(trait).__name__
    found = words.get(kind, kind)
    if getattr(trait, "allow_none", False):
        found += " or None"
    return found


def trait_rows(owner: type[Any]) -> list[tuple[str, str, str, str]]:
    rows = []
    for name, trait in sorted(owner.class_traits(config=True).items()):
        rows.append((code(name), trait_type(trait), code(trait.default_value_repr()), trait.help))
    return rows


def dask_default(key: DaskKey) -> Any:
    """What the package uses where the dask config does not set ``key`` (the config is put back after)."""
    import dask

    reader: Callable[[], Any] = resolve(key.reader)
    saved = dask.config.config.pop("gpu-magics", None)
    try:
        return reader()
    finally:
        if saved is not None:
            dask.config.config["gpu-magics"] = saved


def page() -> str:
    parts = [
        "# Settings\n\n"
        "Three places configure gpu-magics: `%config` in a notebook for the magics, the Jupyter server's "
        "configuration for the server extension, and dask's configuration for how cluster cells are computed."
    ]
    parts.append(
        "## The magics\n\n"
        "Set in a notebook with `%config Class.name = value` (or in `ipython_config.py` as "
        "`c.Class.name = value`); they take effect at once."
    )
    for spec in MAGICS_SETTINGS:
        owner = resolve(spec)
        parts.append(
            f"(settings-{owner.__name__.lower()})=\n### {owner.__name__}\n\n"
            + table(("name", "type", "default", "what it does"), trait_rows(owner))
        )
    server = resolve(SERVER_SETTINGS)
    parts.append(
        f"(settings-{server.__name__.lower()})=\n## The server extension: {server.__name__}\n\n"
        f"Set in `jupyter_server_config.py` as `c.{server.__name__}.name = value`, or on the command line as "
        f"`--{server.__name__}.name=value`; read when the server starts.\n\n"
        + table(("name", "type", "default", "what it does"), trait_rows(server))
    )
    rows = [(code(key.key), code(dask_default(key)), key.help) for key in DASK_KEYS]
    parts.append(
        "(settings-dask)=\n## Dask configuration keys\n\n"
        'Set like any dask setting: `dask.config.set({"gpu-magics.fold-reductions": False})` in a notebook, in a '
        "YAML file of dask's config folder, or as `DASK_GPU_MAGICS__FOLD_REDUCTIONS=False` in the environment. A "
        "value of the wrong kind is refused in one line when a cell uses it.\n\n"
        + table(("key", "default", "what it does"), rows)
    )
    rows = [(code(name), who, words) for name, who, words in ENVIRONMENT]
    parts.append(
        "(settings-environment)=\n## Environment variables\n\n"
        "Those set by `you` change what gpu-magics does; gpu-magics sets the others for the processes it starts.\n\n"
        + table(("variable", "set by", "what it does"), rows)
    )
    return HEADER + "\n\n".join(parts) + "\n"
