"""Dask settings both engines use: ``%gpucluster`` sets them for its cluster, ``%%gpurun multi-gpu`` for a cell.

Below both engines on purpose: the cluster engine needs nothing from ``gpurun``.
"""

from __future__ import annotations

from typing import Any

import dask


def cupy_cluster_defaults() -> dict[str, Any]:
    """Settings for CuPy chunks on a distributed cluster, where the user's dask config leaves dask's defaults:
    rechunk by tasks, since distributed's P2P rechunk (dask's pick for big rechunks under a client) fails to
    move CuPy chunks ("P2P ... failed during transfer phase"). ``array.rechunk.method`` set by the user wins."""
    if dask.config.get("array.rechunk.method", default=None) is None:
        return {"array.rechunk.method": "tasks"}
    return {}


def apply(settings: dict[str, Any]) -> dict[str, Any]:
    """Apply dask ``settings`` (a cluster's, while it lives: also outside ``%%gpurun``, its client is the default
    one); returns what puts them back."""
    saved = {key: dask.config.get(key, default=None) for key in settings}
    dask.config.set(settings)
    return saved


def config_switch(name: str, *, on: str, off: str) -> bool:
    """A true-or-false dask config setting of this package (default ``True``); any other value is one line that
    says what each choice does (``on``, ``off``)."""
    from gpu_magics.text.errors import SettingError

    said = dask.config.get(name, default=True)
    if not isinstance(said, bool):
        raise SettingError(f"dask config {name} is {said!r}: set True ({on}) or False ({off})")
    return said
