"""Choosing a GPU source by name, and the one grammar of ``$GPU_MAGICS_SOURCE``.

``nvml`` (the default) reads the real GPUs; ``fake`` is four simulated GPUs, ``fake:N`` N of them and
``fake:path.json`` a spec file (see ``monitor.fake``). The kernel, the workers, the server and the GPU
inventory all read the variable through ``source_from_env`` so that demo mode is the same everywhere.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from gpu_magics.monitor.models import GpuSource

__all__ = ["SOURCE_ENV", "SourceChoice", "default_source", "make_source", "parse_source", "source_from_env"]

SOURCE_ENV = "GPU_MAGICS_SOURCE"
DEFAULT_FAKE_GPUS = 4
MAX_FAKE_GPUS = 64


@dataclass(frozen=True)
class SourceChoice:
    """A parsed ``$GPU_MAGICS_SOURCE``: ``kind`` is ``"nvml"`` or ``"fake"``; a fake has a GPU count or a spec."""

    kind: str = "nvml"
    gpus: int | None = None
    spec: str | None = None

    @property
    def simulated(self) -> bool:
        """Whether the GPUs this names are simulated."""
        return self.kind == "fake"

    def options(self) -> dict[str, Any]:
        """Keyword arguments for ``make_source``."""
        if self.spec is not None:
            return {"spec": self.spec}
        if self.gpus is not None:
            return {"gpus": self.gpus}
        return {"gpus": DEFAULT_FAKE_GPUS} if self.simulated else {}


def parse_source(text: str | None) -> SourceChoice:
    """``"nvml"``, ``"fake"``, ``"fake:8"`` or ``"fake:spec.json"``; anything else is a ``ValueError``."""
    kind, _, argument = (text or "nvml").strip().partition(":")
    kind = kind.strip().lower() or "nvml"
    argument = argument.strip()
    if kind == "nvml" and not argument:
        return SourceChoice()
    if kind != "fake":
        raise ValueError(f"unknown GPU source {text!r} in ${SOURCE_ENV}: expected nvml, fake, fake:N or fake:path.json")
    if not argument:
        return SourceChoice("fake")
    if argument.isdigit():
        return SourceChoice("fake", gpus=min(int(argument), MAX_FAKE_GPUS))
    return SourceChoice("fake", spec=argument)


def source_from_env() -> SourceChoice:
    """What ``$GPU_MAGICS_SOURCE`` names; an unreadable value falls back to NVML (the real GPUs)."""
    try:
        return parse_source(os.environ.get(SOURCE_ENV))
    except ValueError:
        return SourceChoice()


def make_source(kind: str = "nvml", **options: Any) -> GpuSource:
    """A source by name: ``"nvml"`` (real GPUs) or ``"fake"`` (options ``gpus=N`` or ``spec=path/dict``)."""
    if kind == "nvml":
        from gpu_magics.monitor.nvml import NvmlSource

        return NvmlSource(**options)
    if kind == "fake":
        from gpu_magics.monitor.fake import FakeSource

        return FakeSource(**options)
    raise ValueError(f"unknown GPU source {kind!r}: expected 'nvml' or 'fake'")


def default_source() -> GpuSource:
    """The source ``$GPU_MAGICS_SOURCE`` names (NVML unless it says ``fake``, ``fake:N`` or ``fake:path``);
    a ``ValueError`` when it names none."""
    choice = parse_source(os.environ.get(SOURCE_ENV))
    return make_source(choice.kind, **choice.options())
