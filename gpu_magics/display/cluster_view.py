"""The ``%gpucluster`` display: one row per worker, the dashboard link; HTML and plain-text forms, so a
saved notebook still shows it. It renders ``cluster.info.ClusterInfo``, plain data built by the
cluster engine."""

from __future__ import annotations

import html
from typing import Any

from gpu_magics.cluster.info import ClusterInfo, WorkerInfo
from gpu_magics.display.format import DASH, STYLE, format_bytes, format_seconds

_STATUS_COLOURS = {"running": "#2e7d32", "paused": "#ef6c00", "closing": "#c62828", "closed": "#c62828"}


def worker_memory_text(worker: WorkerInfo) -> str:
    """``"1.2 GiB / 141 GiB GPU"``, ``"312 MiB / 4.0 GiB host"`` or an en dash."""
    if worker.gpu_memory_total:
        return f"{format_bytes(worker.gpu_memory_used)} / {format_bytes(worker.gpu_memory_total)} GPU"
    if worker.host_memory_limit:
        return f"{format_bytes(worker.host_memory_used)} / {format_bytes(worker.host_memory_limit)} host"
    return DASH


def worker_gpu_text(worker: WorkerInfo) -> str:
    """``"NVIDIA H200 (GPU 2)"``, or an en dash for a CPU worker."""
    if worker.gpu_name is None:
        return DASH
    return worker.gpu_name + (f" (GPU {worker.gpu_device})" if worker.gpu_device is not None else "")


class ClusterView:
    """Rich display of a ``ClusterInfo``."""

    def __init__(self, info: ClusterInfo) -> None:
        self.info = info

    def _headline(self) -> str:
        info = self.info
        how = {"gpu": "started here", "cpu": "started here", "attached": "attached, not started here"}
        return f"Cluster {info.name!r}: {info.hardware}, {how.get(info.kind, info.kind)}"

    def _timing(self) -> str | None:
        info = self.info
        if info.ready_s is None:
            return None
        if info.warm_s is None:
            return f"workers ready in {format_seconds(info.ready_s)}"
        total = format_seconds(info.ready_s + info.warm_s)
        return f"up in {total} (workers ready {format_seconds(info.ready_s)}, warm-up {format_seconds(info.warm_s)})"

    def text(self) -> str:
        """The plain-text form."""
        info = self.info
        lines = [] if info.notice is None else [info.notice]
        lines.append(self._headline())
        lines.append(f"scheduler: {info.scheduler_address}")
        lines.append(f"dashboard: {info.dashboard_url or 'off'}")
        timing = self._timing()
        if timing:
            lines.append(timing)
        header = ("worker", "GPU", "memory", "status", "threads")
        rows = [(w.name, worker_gpu_text(w), worker_memory_text(w), w.status, str(w.threads)) for w in info.workers]
        if not rows:
            lines.append("no workers")
            return "\n".join(lines)
        widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
        for row in [header, *rows]:
            lines.append("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())
        return "\n".join(lines)

    def html(self) -> str:
        """The HTML form (every string from the cluster escaped)."""
        info = self.info
        esc = html.escape
        parts = [f'<div class="gpu-magics-cluster" style="{STYLE}">']
        if info.notice:
            parts.append(f'<p style="margin:0 0 4px 0"><em>{esc(info.notice)}</em></p>')
        parts.append(f'<p style="margin:0 0 4px 0"><strong>{esc(self._headline())}</strong><br>')
        parts.append(f"scheduler <code>{esc(info.scheduler_address)}</code> &middot; dashboard ")
        parts.append(_link(info.dashboard_url) if info.dashboard_url else "off")
        timing = self._timing()
        if timing:
            parts.append(f" &middot; {esc(timing)}")
        parts.append("</p>")
        if not info.workers:
            parts.append("<p>no workers</p></div>")
            return "".join(parts)
        parts.append('<table style="border-collapse:collapse"><thead><tr>')
        parts.extend(
            f'<th style="text-align:left;padding:2px 8px">{h}</th>'
            for h in ("worker", "GPU", "memory", "status", "threads")
        )
        parts.append("</tr></thead><tbody>")
        for worker in info.workers:
            colour = _STATUS_COLOURS.get(worker.status, "inherit")
            cells = (
                f'<td style="padding:2px 8px" title="{esc(worker.address)}">{esc(worker.name)}</td>',
                f'<td style="padding:2px 8px">{esc(worker_gpu_text(worker))}</td>',
                f'<td style="padding:2px 8px">{esc(worker_memory_text(worker))}</td>',
                f'<td style="padding:2px 8px;color:{colour}">{esc(worker.status)}</td>',
                f'<td style="padding:2px 8px">{worker.threads}</td>',
            )
            parts.append("<tr>" + "".join(cells) + "</tr>")
        parts.append("</tbody></table></div>")
        return "".join(parts)

    def _repr_html_(self) -> str:
        return self.html()

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, str]:
        return {"text/plain": self.text(), "text/html": self.html()}

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(self.text())

    def __repr__(self) -> str:
        return self.text()


class DashboardLink:
    """A clickable dashboard address (``%gpucluster dashboard``)."""

    def __init__(self, url: str) -> None:
        self.url = url

    def _repr_html_(self) -> str:
        return f"Dask dashboard: {_link(self.url)}"

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, str]:
        return {"text/plain": repr(self), "text/html": self._repr_html_()}

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(repr(self))

    def __repr__(self) -> str:
        return f"Dask dashboard: {self.url}"


def _link(url: str) -> str:
    text = html.escape(url)
    if not url.startswith(("http://", "https://")):
        return f"<code>{text}</code>"
    return f'<a href="{html.escape(url, quote=True)}" target="_blank" rel="noopener">{text}</a>'
