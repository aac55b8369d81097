"""The spec of simulated GPUs (``$GPU_MAGICS_SOURCE=fake...``): read from a dict or a JSON file, or made for N
busy-looking GPUs (``demo_spec``), with stable made-up UUIDs. ``fake`` describes the spec's fields."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping
from typing import Any

GIB = 2**30


def load_spec(
    spec: str | os.PathLike[str] | Mapping[str, Any] | None = None, *, gpus: int | None = None
) -> dict[str, Any]:
    """A spec from a dict, a JSON file, or ``gpus=N`` (``demo_spec``); four demo GPUs when given neither."""
    if spec is not None and gpus is not None:
        raise ValueError("give a fake GPU spec or a number of GPUs, not both")
    if spec is None:
        return demo_spec(4 if gpus is None else gpus)
    if isinstance(spec, Mapping):
        data = dict(spec)
    else:
        with open(spec, encoding="utf-8") as file:
            data = json.load(file)
    if not isinstance(data, dict) or not isinstance(data.get("gpus"), list):
        raise ValueError("a fake GPU spec is an object with a 'gpus' list")
    return data


def demo_spec(gpus: int) -> dict[str, Any]:
    """``gpus`` busy-looking H200s whose values move over ticks (deterministic)."""
    if gpus < 0:
        raise ValueError(f"the number of fake GPUs cannot be negative (got {gpus})")

    def wave(low: float, high: float, period: int, i: int) -> dict[str, float]:
        return {"min": low, "max": high, "period": period, "phase": 3 * i}

    return {
        "gpus": [
            {
                "name": "NVIDIA H200",
                "uuid": "GPU-" + fake_uuid(f"gpu{i}"),
                "memory_total": 150754820096,
                "memory_used": wave(2 * GIB, 120 * GIB, 60, i),
                "gpu_util": wave(0, 100, 20, i),
                "memory_util": wave(0, 60, 20, i),
                "temperature": wave(32, 68, 80, i),
                "power": wave(90, 650, 20, i),
                "power_limit": 700.0,
                "sm_clock": wave(1200, 1980, 20, i),
                "pcie_rx": wave(0, 20e9, 30, i),
                "pcie_tx": wave(0, 8e9, 30, i),
                "nvlink_rx": wave(0, 300e9, 30, i),
                "nvlink_tx": wave(0, 300e9, 30, i),
                # the process holds 80% of what the GPU uses, tick by tick (the same wave): never more
                "processes": [{"pid": 4000 + i, "used_memory": wave(1.6 * GIB, 96 * GIB, 60, i)}],
            }
            for i in range(gpus)
        ]
    }


def fake_uuid(seed: str) -> str:
    """A UUID-shaped string made from ``seed``, the same every time."""
    h = hashlib.sha1(seed.encode()).hexdigest()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"
