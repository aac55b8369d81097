"""Rich displays: dask arrays, task-graph summaries and CuPy arrays (HTML/SVG with plain-text fallbacks).

Importing this package imports neither dask, CuPy, ipywidgets nor NVML; each is loaded when first needed.
"""

from __future__ import annotations

from gpu_magics.display.formatters import as_widget, set_mode
from gpu_magics.display.graph_view import GraphSummary, graph_summary
from gpu_magics.display.objects.array_view import ArrayView, array_info, set_gpu_memory_probe, visible_gpu_memory
from gpu_magics.display.objects.cupy_view import CupyView, cupy_info

__all__ = [
    "ArrayView",
    "CupyView",
    "GraphSummary",
    "array_info",
    "as_widget",
    "cupy_info",
    "graph_summary",
    "set_gpu_memory_probe",
    "set_mode",
    "visible_gpu_memory",
]
