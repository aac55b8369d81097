"""Pure HTML/SVG for GPU monitoring: the live panel's rows and the static per-cell summary."""

from __future__ import annotations

import html
from collections.abc import Sequence

from gpu_magics.display.format import MUTED, STYLE, format_bytes, format_number, format_percent, format_rate
from gpu_magics.monitor.models import GpuReading, HostReading, Snapshot

_GPU_COLOUR = "#76b900"
_MEMORY_COLOUR = "#4c8bf5"
_CPU_COLOUR = "#6b8fb5"


def bar(percent: float | None, colour: str, width: int = 90) -> str:
    """A small horizontal bar (inline HTML) filled to ``percent``."""
    filled = 0.0 if percent is None else max(0.0, min(100.0, percent))
    return (
        f"<span style='display:inline-block;width:{width}px;height:8px;border-radius:2px;"
        f"background:var(--jp-layout-color3,#ddd);vertical-align:middle'>"
        f"<span style='display:block;width:{filled:.1f}%;height:100%;border-radius:2px;background:{colour}'></span>"
        f"</span>"
    )


def sparkline(values: Sequence[float | None], colour: str, width: int = 120, height: int = 18) -> str:
    """An inline SVG polyline of ``values`` on a 0..100 scale; gaps where a value is missing."""
    points = [(i, v) for i, v in enumerate(values) if v is not None]
    if len(values) < 2 or not points:
        return f"<svg width='{width}' height='{height}'></svg>"
    step = width / (len(values) - 1)
    coordinates = " ".join(
        f"{i * step:.1f},{height - 1 - (height - 2) * max(0.0, min(100.0, v)) / 100:.1f}" for i, v in points
    )
    return (
        f"<svg xmlns='http://www.w3.org/2000/svg' width='{width}' height='{height}' style='vertical-align:middle'>"
        f"<polyline fill='none' stroke='{colour}' stroke-width='1.5' points='{coordinates}'/></svg>"
    )


def timeline(
    times: Sequence[float], values: Sequence[float | None], colour: str, width: int = 240, height: int = 36
) -> str:
    """An inline SVG area chart of ``values`` (0..100) against ``times`` (seconds from the start)."""
    pairs = [(t, v) for t, v in zip(times, values, strict=False) if v is not None]
    span = max(times[-1] - times[0], 1e-9) if len(times) >= 2 else 1.0
    frame = (
        f"<svg xmlns='http://www.w3.org/2000/svg' width='{width}' height='{height}' style='vertical-align:middle'>"
        f"<rect x='0' y='0' width='{width}' height='{height}' fill='none' stroke='currentColor' opacity='.2'/>"
    )
    if not pairs:
        return frame + "</svg>"
    start = times[0]
    line = []
    for k, (t, v) in enumerate(pairs):
        x = (t - start) / span * width
        y = height - 1 - (height - 5) * max(0.0, min(100.0, v)) / 100  # 100% sits 4 px below the top
        line.append(f"{'M' if k == 0 else 'L'}{x:.1f},{y:.1f}")
    first_x = (pairs[0][0] - start) / span * width
    last_x = (pairs[-1][0] - start) / span * width
    area = f"M{first_x:.1f},{height} {' '.join(line).replace('M', 'L', 1)} L{last_x:.1f},{height}Z"
    return (
        frame + f"<path d='{area}' fill='{colour}' fill-opacity='.18' stroke='none'/>"
        f"<path d='{' '.join(line)}' fill='none' stroke='{colour}' stroke-width='1.5'/></svg>"
    )


def gpu_row(reading: GpuReading, history: Sequence[float | None]) -> str:
    """One live row: name, utilization and memory bars, temperature, power, recent utilization."""
    name = html.escape(f"{reading.label} · {reading.name}")
    if reading.error is not None:
        return f"<tr><td>{name}</td><td colspan='5' style='{MUTED}'>{html.escape(reading.error)}</td></tr>"
    memory_percent = (
        100 * reading.memory_used / reading.memory_total
        if reading.memory_used is not None and reading.memory_total
        else None
    )
    temperature = format_number(reading.temperature, "°C")
    power = format_number(reading.power, "W")
    if reading.power is not None and reading.power_limit:
        power += f" / {format_number(reading.power_limit, 'W')}"
    memory = f"{format_bytes(reading.memory_used)} / {format_bytes(reading.memory_total)}"
    return (
        f"<tr><td style='padding-right:8px'>{name}</td>"
        f"<td>{bar(reading.gpu_util, _GPU_COLOUR)} {format_percent(reading.gpu_util)}</td>"
        f"<td>{bar(memory_percent, _MEMORY_COLOUR)} {html.escape(memory)}</td>"
        f"<td style='padding:0 6px'>{temperature}</td><td style='padding:0 6px'>{html.escape(power)}</td>"
        f"<td style='padding:0 6px' class='gpu-magics-links'>{html.escape(links_line(reading))}</td>"
        f"<td>{sparkline(history, _GPU_COLOUR)}</td></tr>"
    )


def links_line(reading: GpuReading) -> str:
    """``"PCIe ↓1.2 GiB/s ↑0 B/s · NVLink ↓0 B/s ↑0 B/s"``, the links NVML reads on this GPU (read every few
    seconds); empty where it reads neither."""
    links = (("PCIe", reading.pcie_rx, reading.pcie_tx), ("NVLink", reading.nvlink_rx, reading.nvlink_tx))
    return " · ".join(f"{name} {format_rate(rx, tx)}" for name, rx, tx in links if rx is not None or tx is not None)


def host_line(host: HostReading) -> str:
    """CPU and memory of the host, one line."""
    memory_percent = 100 * host.memory_used / host.memory_total if host.memory_used and host.memory_total else None
    return (
        f"<div>host · {host.cpu_count} CPUs {bar(host.cpu_percent, _CPU_COLOUR, 70)} {format_percent(host.cpu_percent)}"
        f" · memory {bar(memory_percent, _MEMORY_COLOUR, 70)} "
        f"{format_bytes(host.memory_used)} / {format_bytes(host.memory_total)}</div>"
    )


def live_panel(snapshots: Sequence[Snapshot], title: str = "GPUs", below_title: str = "") -> str:
    """The live panel for the newest of ``snapshots`` (older ones feed the sparklines); ``below_title`` is
    HTML shown under the title (a running cell's progress)."""
    if not snapshots:
        return (
            f"<div class='gpu-magics-monitor' style='{STYLE}'>{html.escape(title)}: waiting for the first sample…"
            f"{below_title}</div>"
        )
    latest = snapshots[-1]
    rows = []
    for reading in latest.gpus:
        history = [_reading_util(s, reading.index) for s in snapshots]
        rows.append(gpu_row(reading, history))
    status = f"<div style='{MUTED}'>{html.escape(latest.status)}</div>" if latest.status else ""
    table = f"<table style='border-collapse:collapse'>{''.join(rows)}</table>" if rows else ""
    return (
        f"<div class='gpu-magics-monitor' style='{STYLE}'><b>{html.escape(title)}</b>{below_title}"
        f"{table}{status}{host_line(latest.host)}</div>"
    )


def _reading_util(snapshot: Snapshot, index: int) -> float | None:
    for reading in snapshot.gpus:
        if reading.index == index:
            return reading.gpu_util
    return None


def live_panel_text(snapshot: Snapshot | None) -> str:
    """A plain-text version of the live panel, for terminals and saved notebooks."""
    if snapshot is None:
        return "GPUs: no sample yet"
    lines = []
    for r in snapshot.gpus:
        if r.error:
            lines.append(f"{r.label} {r.name}: {r.error}")
            continue
        lines.append(
            f"{r.label} {r.name}: util {format_percent(r.gpu_util)}, memory {format_bytes(r.memory_used)} / "
            f"{format_bytes(r.memory_total)}, {format_number(r.temperature, '°C')}, "
            f"{format_number(r.power, 'W')}" + (f", {links}" if (links := links_line(r)) else "")
        )
    if snapshot.status:
        lines.append(snapshot.status)
    h = snapshot.host
    lines.append(
        f"host: {h.cpu_count} CPUs at {format_percent(h.cpu_percent)}, memory {format_bytes(h.memory_used)} / "
        f"{format_bytes(h.memory_total)}"
    )
    return "\n".join(lines)
