"""``GpuMagicsServer``: the server extension's configuration (``c.GpuMagicsServer.interval = 0.5``)."""

from __future__ import annotations

import math
import os
from typing import Any

from traitlets import Bool, Enum, Float, Int, TraitError, Unicode, default, validate
from traitlets.config import Configurable

from gpu_magics.arrays.caps.cap import SERVER_CAP_ENV, CapError, MemoryCap, parse_cap
from gpu_magics.monitor.sampler import MIN_INTERVAL
from gpu_magics.monitor.sources import DEFAULT_FAKE_GPUS, MAX_FAKE_GPUS, source_from_env


class GpuMagicsServer(Configurable):
    """How the server samples GPUs for the side panel."""

    interval = Float(
        1.0,
        help="Seconds between GPU samples pushed to the side panel (at least 0.1; smaller values are raised).",
    ).tag(config=True)

    slow_interval = Float(
        2.0,
        help="Seconds between reads of the slow fields (PCIe, NVLink, per-process memory); at least 0.1.",
    ).tag(config=True)

    history = Int(
        600,
        help="How many samples the server keeps, for a panel that opens late (1 to 100000).",
    ).tag(config=True)

    source = Enum(
        ["nvml", "fake"],
        default_value="nvml",
        help="Where GPU readings come from: 'nvml' (real GPUs) or 'fake' (tests, demos without GPUs). "
        "Defaults to $GPU_MAGICS_SOURCE ('fake' or 'fake:N'), else 'nvml'.",
    ).tag(config=True)

    fake_gpus = Int(
        4, help="How many GPUs the 'fake' source has (0 to 64); $GPU_MAGICS_SOURCE=fake:N sets the default."
    ).tag(config=True)

    metrics = Bool(
        True,
        help="Add GPU use per GPU, kernel and cluster (gpu_magics_* series) to the server's Prometheus endpoint "
        "/metrics.",
    ).tag(config=True)

    metrics_interval = Float(
        5.0,
        help="Seconds between refreshes of the /metrics figures (read off the scrape: a scrape answers from the "
        "last refresh); at least 0.1.",
    ).tag(config=True)

    metrics_notebook_label = Bool(
        False,
        help="Label each kernel's /metrics series with its notebook's path (label 'notebook'; one series per "
        "notebook, so off by default).",
    ).tag(config=True)

    idle_utilization = Float(
        5.0,
        help="A GPU busier than this (percent) over a refresh is not idle: below it, memory held there counts as "
        "held while idle (gpu_magics_kernel_idle_hold_seconds).",
    ).tag(config=True)

    idle_hold_warning_min = Float(
        30.0,
        help="Minutes a kernel's GPU memory sits on idle GPUs before the side panel says so, with the actions that "
        "give it back (api/idle-hold).",
    ).tag(config=True)

    idle_reclaim_min = Float(
        0.0,
        help="Minutes a kernel's GPU memory may sit on idle GPUs before the server has the kernel give back what "
        "its pools cache and close its cluster where that loses none of the user's data; the notebook says so at "
        "its next cell, /metrics counts it (gpu_magics_idle_reclaims_total). A kernel is never ended. 0 (the "
        "default) turns it off; fractions of a minute are allowed.",
    ).tag(config=True)

    idle_reclaim_park = Bool(
        False,
        help="With idle_reclaim_min on, park the kernel's cluster rather than close it or leave it running: its GPU "
        "workers give their GPUs back, their data kept, and the notebook's next cell that sends the cluster work "
        "resumes them (%gpucluster park). A cluster that cannot be parked is treated as without it.",
    ).tag(config=True)

    memory_cap = Unicode(
        "",
        help="The most GPU memory each notebook may hold on each GPU, all its processes there together (its kernel, "
        "its cluster's workers, its SPMD ranks, each an equal share): a size ('20GiB', '40GB') or a share of each "
        "GPU's memory ('25%'); empty (the default) for none. Set where each process starts, through its allocators' "
        "own limits (CuPy's pool, PyTorch's and JAX's fractions, RMM's pool): memory taken outside them is not "
        "stopped. A user may lower it for a notebook (%gpumemory --cap), never raise it. Given to the kernels this "
        "server starts from now on ($GPU_MAGICS_MEMORY_CAP).",
    ).tag(config=True)

    @validate("memory_cap")
    def _check_memory_cap(self, proposal: dict[str, Any]) -> str:
        try:
            cap = parse_cap(str(proposal["value"]))
        except CapError as error:
            raise TraitError(f"GpuMagicsServer.{error}") from None
        return "" if cap is None else cap.spec()

    def cap(self) -> MemoryCap | None:
        """The server's memory cap, ``None`` where it has none."""
        return parse_cap(self.memory_cap)

    @default("memory_cap")
    def _default_memory_cap(self) -> str:
        return os.environ.get(SERVER_CAP_ENV, "")

    @default("source")
    def _default_source(self) -> str:
        return source_from_env().kind

    @default("fake_gpus")
    def _default_fake_gpus(self) -> int:
        count = source_from_env().gpus
        return DEFAULT_FAKE_GPUS if count is None else count

    @validate("interval", "slow_interval", "metrics_interval")
    def _clamp_interval(self, proposal: dict[str, Any]) -> float:
        value = float(proposal["value"])
        if not math.isfinite(value):
            raise TraitError(f"{proposal['trait'].name} must be a finite number of seconds, got {value!r}")
        return max(MIN_INTERVAL, value)

    @validate("history")
    def _check_history(self, proposal: dict[str, Any]) -> int:
        value = int(proposal["value"])
        if not 1 <= value <= 100_000:
            raise TraitError(f"history must be between 1 and 100000 samples, got {value}")
        return value

    @validate("fake_gpus")
    def _check_fake_gpus(self, proposal: dict[str, Any]) -> int:
        value = int(proposal["value"])
        if not 0 <= value <= MAX_FAKE_GPUS:
            raise TraitError(f"fake_gpus must be between 0 and {MAX_FAKE_GPUS}, got {value}")
        return value

    @validate("idle_hold_warning_min")
    def _check_warning(self, proposal: dict[str, Any]) -> float:
        value = float(proposal["value"])
        if not math.isfinite(value) or value < 0:
            raise TraitError(f"idle_hold_warning_min must be a number of minutes >= 0, got {value!r}")
        return value

    @validate("idle_reclaim_min")
    def _check_reclaim(self, proposal: dict[str, Any]) -> float:
        value = float(proposal["value"])
        if not math.isfinite(value) or value < 0:
            raise TraitError(
                f"idle_reclaim_min must be a number of minutes >= 0 (0 turns it off, e.g. 60), got {value!r}"
            )
        return value

    @validate("idle_utilization")
    def _check_idle_utilization(self, proposal: dict[str, Any]) -> float:
        value = float(proposal["value"])
        if not 0 <= value <= 100:
            raise TraitError(f"idle_utilization must be a percentage from 0 to 100, got {value!r}")
        return value
