"""Choosing the free GPUs for ``%gpucluster --gpus free[:N]`` and ``%%gpurun gpu --device free``: the settings both
magics share (``%config ClusterMagics.free_memory = 0.2``), and the one line that says what was chosen and why the
other GPUs were not."""

from __future__ import annotations

import os
from collections.abc import Collection, Sequence

from traitlets import Float, TraitError, validate

from gpu_magics import gpus
from gpu_magics.display.format import format_bytes, format_percent
from gpu_magics.gpus import GpuDevice
from gpu_magics.magics.config_gate import CheckedSettings
from gpu_magics.monitor.availability import Assessment, FreeRule, assess, rank, recent
from gpu_magics.text.errors import LineError


class FreeGpuSettings(CheckedSettings):
    """When a GPU counts as free (a base of ``ClusterMagics`` and ``GpuMagics``: each has its own values; a value
    ``%config`` gives either that it refuses fails the cell, ``config_gate``)."""

    free_memory = Float(
        0.1,
        help="A free GPU has at most this share of its memory in use (0 to 1), over the last few samples.",
    ).tag(config=True)

    free_utilization = Float(
        10.0,
        help="A free GPU was busy at most this many percent of the time (0 to 100), on average over the last few "
        "samples.",
    ).tag(config=True)

    @validate("free_memory")
    def _check_memory(self, proposal: dict[str, object]) -> float:
        value = float(proposal["value"])  # type: ignore[arg-type]
        if not 0 <= value <= 1:
            raise TraitError(f"free_memory is a share of a GPU's memory, from 0 to 1 (like 0.1), not {value:g}")
        return value

    @validate("free_utilization")
    def _check_utilization(self, proposal: dict[str, object]) -> float:
        value = float(proposal["value"])  # type: ignore[arg-type]
        if not 0 <= value <= 100:
            raise TraitError(f"free_utilization is a percentage, from 0 to 100 (like 10), not {value:g}")
        return value

    @property
    def free_rule(self) -> FreeRule:
        return FreeRule(memory=self.free_memory, utilization=self.free_utilization)


def choose_free(
    what: str, count: int, rule: FreeRule, *, config: str, exclude: Collection[int] = ()
) -> tuple[tuple[int, ...], str]:
    """The indices of the free GPUs (``count`` 0: all of them; else the ``count`` freest) and the line to print;
    a one-line ``LineError`` when none (or too few) is free. ``what`` names the request (``"%gpucluster --gpus
    free"``), ``config`` the class whose settings apply (``"ClusterMagics"``); memory that the processes
    ``exclude`` hold does not count."""
    from gpu_magics.monitor.sampler import get_sampler

    devices = gpus.inventory().devices()
    if not devices:
        reason = gpus.inventory().unavailable_reason() or "no CUDA device is visible"
        raise LineError(f"{what}: no GPU to choose from ({reason})")
    snapshots = recent(get_sampler())
    assessed = assess(devices, snapshots, rule, exclude=exclude, me=os.getpid())
    freest = rank(assessed)
    limits = f"at most {format_percent(rule.memory * 100)} of memory in use and {rule.utilization:g}% busy"
    busy = [a for a in assessed if not a.free]
    if not freest or len(freest) < count:
        found = "no GPU is free" if not freest else f"only {_names(freest, devices)} free, {count} asked"
        fix = f"raise the limits with %config {config}.free_memory (or free_utilization), or name the GPUs"
        raise LineError(f"{what}: {found} ({limits}); {_reasons(busy, devices)}; {fix}")
    chosen = freest[:count] if count else freest
    line = f"{what}: chose {_names(chosen, devices)}, free ({limits} over {_span(snapshots)})"
    spare = [a for a in freest if a not in chosen]
    if spare:
        line += f"; {_names(spare, devices)} free too"
    if busy:
        line += f"; not {_reasons(busy, devices)}"
    return tuple(sorted(a.index for a in chosen)), line


def _label(index: int, devices: Sequence[GpuDevice]) -> str:
    device = next((d for d in devices if d.index == index), None)
    return f"{index}" + (" (MIG)" if device is not None and device.uuid.startswith("MIG-") else "")


def _names(assessed: Sequence[Assessment], devices: Sequence[GpuDevice]) -> str:
    """``"GPU 1, 3"``, ``"GPU 2 (MIG)"``."""
    return "GPU " + ", ".join(_label(a.index, devices) for a in sorted(assessed, key=lambda a: a.index))


def _reasons(busy: Sequence[Assessment], devices: Sequence[GpuDevice]) -> str:
    """``"GPU 0: 40.0 GiB of 140 GiB in use, 97% busy; GPU 2: 95% busy"``."""
    return "; ".join(f"GPU {_label(a.index, devices)}: {_why(a)}" for a in busy)


def _why(assessed: Assessment) -> str:
    """``"40.0 GiB of 140 GiB in use, 97% busy"``; what this kernel holds itself is said apart."""
    if assessed.error is not None:
        return f"unreadable: {assessed.error}"
    parts = []
    if assessed.busy_memory:
        text = f"{format_bytes(assessed.memory_used)} of {format_bytes(assessed.memory_total)} in use"
        if assessed.mine:
            text += f", {format_bytes(assessed.mine)} of it this kernel's: %gpucluster free gives its cache back"
        parts.append(text)
    if assessed.busy_utilization:
        parts.append(f"{format_percent(assessed.utilization)} busy")
    return ", ".join(parts)


def _span(snapshots: Sequence[object]) -> str:
    """``"the last 1.5 s"``: the time the samples looked at cover."""
    times = [getattr(s, "time", 0.0) for s in snapshots]
    seconds = max(times) - min(times) if times else 0.0
    return f"the last {seconds:.1f} s"


def own_descendants() -> set[int]:
    """This kernel's child processes, all the way down (the workers of a cluster it started)."""
    import psutil

    try:
        return {child.pid for child in psutil.Process().children(recursive=True)}
    except psutil.Error:
        return set()
