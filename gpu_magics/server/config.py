"""``GpuMagicsServer``: the server extension's configuration (``c.GpuMagicsServer.interval = 0.5``)."""

from __future__ import annotations

import math
import os
from typing import Any

from traitlets import Enum, Float, Int, TraitError, default, validate
from traitlets.config import Configurable

MIN_INTERVAL = 0.1
"""The shortest sampling and push interval, in seconds."""
SOURCE_ENV = "GPU_MAGICS_SOURCE"
"""``nvml``, ``fake`` or ``fake:N``: the default of ``source`` and ``fake_gpus`` when config sets neither."""


def _env_source() -> tuple[str, int | None]:
    kind, _, count = os.environ.get(SOURCE_ENV, "").strip().partition(":")
    return kind, int(count) if count.isdigit() else None


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

    @default("source")
    def _default_source(self) -> str:
        kind, _ = _env_source()
        return "fake" if kind == "fake" else "nvml"

    @default("fake_gpus")
    def _default_fake_gpus(self) -> int:
        _, count = _env_source()
        return 4 if count is None else min(count, 64)

    @validate("interval", "slow_interval")
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
        if not 0 <= value <= 64:
            raise TraitError(f"fake_gpus must be between 0 and 64, got {value}")
        return value
