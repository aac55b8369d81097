"""Rich display of a CuPy array: device, shape, dtype, bytes, memory-pool use and a small host preview.

CuPy is never imported at module import: a CuPy array's module is already loaded when one is displayed, and
tests pass a stand-in module. Only a small corner of the array is copied to the host (slice first, then ``get``).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any

from gpu_magics.display import svg
from gpu_magics.display.format import STYLE, format_bytes

PREVIEW_LAST = 6  # elements along the last axis
PREVIEW_SECOND = 4  # along the second-to-last
PREVIEW_OTHER = 2  # along any other


@dataclass(frozen=True)
class CupyInfo:
    """What the display shows about one CuPy array."""

    device: int | None
    shape: tuple[int, ...]
    dtype: str
    nbytes: int
    pool_used: int | None
    pool_total: int | None
    device_free: int | None
    device_total: int | None
    preview: str
    preview_shape: tuple[int, ...]


def _cupy(module: Any | None) -> Any:
    if module is not None:
        return module
    return sys.modules.get("cupy") or __import__("cupy")


def preview_index(shape: tuple[int, ...]) -> tuple[slice, ...]:
    """The leading corner to copy to the host: a few elements per axis, never the whole array."""
    n = len(shape)
    sizes = [PREVIEW_OTHER] * n
    if n >= 1:
        sizes[-1] = PREVIEW_LAST
    if n >= 2:
        sizes[-2] = PREVIEW_SECOND
    return tuple(slice(0, k) for k in sizes)


def cupy_info(array: Any, cupy: Any | None = None) -> CupyInfo:
    """Collect a :class:`CupyInfo` (``cupy``: the CuPy module, looked up lazily when None)."""
    import numpy as np

    cp = _cupy(cupy)
    device = getattr(getattr(array, "device", None), "id", None)
    used = total = free = capacity = None
    if isinstance(device, int):
        try:
            with cp.cuda.Device(device):
                pool = cp.get_default_memory_pool()
                used, total = int(pool.used_bytes()), int(pool.total_bytes())
                free, capacity = (int(v) for v in cp.cuda.runtime.memGetInfo())
        except RuntimeError:  # CUDA's error (CuPy's CUDARuntimeError): no pool figures
            pass
    shape = tuple(int(s) for s in array.shape)
    corner = array[preview_index(shape)] if shape else array
    host = np.asarray(corner.get())
    text = np.array2string(host, precision=4, suppress_small=True, threshold=64, edgeitems=3, max_line_width=100)
    return CupyInfo(
        device=device if isinstance(device, int) else None,
        shape=shape,
        dtype=str(array.dtype),
        nbytes=int(array.nbytes),
        pool_used=used,
        pool_total=total,
        device_free=free,
        device_total=capacity,
        preview=text,
        preview_shape=tuple(host.shape),
    )


class CupyView:
    """A CuPy array's rich display: ``text/plain`` and ``text/html``."""

    def __init__(self, array: Any, cupy: Any | None = None) -> None:
        self.info = cupy_info(array, cupy)

    def _rows(self) -> list[tuple[str, str]]:
        i = self.info
        pool = (
            "unknown"
            if i.pool_used is None
            else f"{format_bytes(i.pool_used)} used of {format_bytes(i.pool_total)} held"
        )
        device = (
            "unknown"
            if i.device_free is None or i.device_total is None
            else f"{format_bytes(i.device_total - i.device_free)} used of {format_bytes(i.device_total)}"
        )
        return [
            ("Device", "unknown" if i.device is None else f"GPU {i.device}"),
            ("Shape", svg.format_shape(i.shape)),
            ("Dtype", i.dtype),
            ("Bytes", format_bytes(i.nbytes)),
            ("Memory pool", pool),
            ("Device memory", device),
        ]

    def _preview_note(self) -> str:
        i = self.info
        whole = i.preview_shape == i.shape
        return "values" if whole else f"first {svg.format_shape(i.preview_shape)} of {svg.format_shape(i.shape)}"

    def text(self) -> str:
        """Plain-text rendering."""
        i = self.info
        where = "" if i.device is None else f", device={i.device}"
        lines = [f"cupy.ndarray<shape={svg.format_shape(i.shape)}, dtype={i.dtype}{where}>"]
        lines += [f"  {k:<13} {v}" for k, v in self._rows()[3:]]
        lines.append(f"  {self._preview_note()}:")
        lines += ["    " + line for line in i.preview.splitlines()]
        return "\n".join(lines)

    def html(self) -> str:
        """HTML rendering: a table and the preview."""
        cell = 'style="padding:2px 8px;text-align:left"'
        rows = "".join(
            f"<tr><th {cell}>{svg.escape(k)}</th><td {cell}>{svg.escape(v)}</td></tr>" for k, v in self._rows()
        )
        fill, stroke = svg.COLOURS["cupy"]
        return (
            f'<div class="gpu-magics-cupy" style="{STYLE};border-left:4px solid {stroke};padding-left:8px">'
            '<div style="font-family:monospace">cupy.ndarray</div>'
            f'<table style="border-collapse:collapse"><tbody>{rows}</tbody></table>'
            f'<div style="{svg.LABEL}">{svg.escape(self._preview_note())}</div>'
            f'<pre style="background:{fill};padding:4px;margin:2px 0">{svg.escape(self.info.preview)}</pre></div>'
        )

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, str]:
        return {"text/plain": self.text(), "text/html": self.html()}

    def __repr__(self) -> str:
        return self.text()
