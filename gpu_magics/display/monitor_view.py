"""Pure HTML/SVG for GPU monitoring: the live panel's rows and the static per-cell summary."""

from __future__ import annotations

import html
from collections.abc import Sequence

from gpu_magics.display.format import DASH, MUTED, STYLE, format_bytes, format_number, format_percent, format_rate
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


def sparkline(values: Sequence[float | None], colour: str, width: int = 90, height: int = 18) -> str:
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
    """An inline SVG area chart of ``values`` (0..100) against ``times`` (seconds from the start): a base line, a
    dotted 100% line and (30 px tall or more) the scale's two labels at its left, then the area and its line (no
    frame: its top edge would hide a line at 100%, an empty box to the eye). A single value, or values all at one
    moment, is drawn across the whole width: it stands for the span it was measured over."""
    labelled = height >= 30  # a short chart (a row of a table) has room for the dotted line only
    left = SCALE_W if labelled else 0
    plot = width - left
    label = "font-size:9px;font-family:var(--jp-ui-font-family,sans-serif)"
    scale = (
        f"<text x='{left - 3}' y='8' text-anchor='end' style='{label}' fill='currentColor' opacity='.6'>100%</text>"
        f"<text x='{left - 3}' y='{height - 1}' text-anchor='end' style='{label}' fill='currentColor' "
        "opacity='.6'>0</text>"
        if labelled
        else ""
    )
    frame = (
        f"<svg xmlns='http://www.w3.org/2000/svg' width='{width}' height='{height}' style='vertical-align:middle'>"
        f"{scale}<path d='M{left},{height - 0.5}H{width}' stroke='currentColor' stroke-opacity='.35'/>"
        f"<path d='M{left},4.5H{width}' stroke='currentColor' stroke-opacity='.25' stroke-dasharray='2 3'/>"
    )
    pairs = [(t, v) for t, v in zip(times, values, strict=False) if v is not None]
    if not pairs:
        return frame + "</svg>"
    start = times[0]
    span = times[-1] - start if len(times) >= 2 else 0.0
    xs = [left + ((t - start) / span * plot if span > 1e-9 else 0.0) for t, _ in pairs]
    if max(xs) - min(xs) < 1.0:  # one value (or all at one moment): level across the chart
        mean = sum(v for _, v in pairs) / len(pairs)
        pairs, xs = [(start, mean), (start, mean)], [float(left), float(width)]
    line = []
    for k, ((_, v), x) in enumerate(zip(pairs, xs, strict=True)):
        y = height - 1 - (height - 5) * max(0.0, min(100.0, v)) / 100  # 100% sits 4 px below the top
        line.append(f"{'M' if k == 0 else 'L'}{x:.1f},{y:.1f}")
    area = f"M{xs[0]:.1f},{height} {' '.join(line).replace('M', 'L', 1)} L{xs[-1]:.1f},{height}Z"
    return (
        frame + f"<path d='{area}' fill='{colour}' fill-opacity='.2' stroke='none'/>"
        f"<path d='{' '.join(line)}' fill='none' stroke='{colour}' stroke-width='2'/></svg>"
    )


SCALE_W = 28
"""The width of a timeline's scale labels ("100%", "0"), left of its plot (30 px tall or more)."""


CELL = "padding:1px 6px;white-space:nowrap"
"""A panel cell: never wraps (the panel scrolls sideways in an output narrower than it)."""
RIGHT = CELL + ";text-align:right"
BAR = "padding:1px 0 1px 6px;white-space:nowrap"
BARRED = ("util", "memory")  # the columns drawn as a bar and a figure (two cells under one heading)
FIGURES = ("temp", "power", "PCIe \u2193 \u2191", "NVLink \u2193 \u2191")  # right-aligned, as their heads
HEAD = f"{CELL};font-weight:normal;text-align:left;{MUTED}"


def pair(used: float | None, total: float | None, unit: str = "") -> str:
    """``"54.8 / 140 GiB"`` (one unit said once), ``"512 MiB / 140 GiB"``, ``"457 / 700 W"`` with ``unit``."""
    if unit:
        if used is None:
            return DASH
        if not total:
            return format_number(used, unit)
        return f"{format_number(used, unit).removesuffix(' ' + unit)} / {format_number(total, unit)}"
    if used is None and total is None:
        return DASH
    first, second = format_bytes(used), format_bytes(total)
    first_value, _, first_unit = first.partition(" ")
    if first_unit and first_unit == second.partition(" ")[2]:
        return f"{first_value} / {second}"
    return f"{first} / {second}"


def rate(received: float | None, sent: float | None) -> str:
    """``"↓6.4 ↑2.6 GiB/s"`` (one unit said once), ``"↓6.4 GiB/s ↑512 MiB/s"``, or an en dash."""
    if received is None and sent is None:
        return DASH
    down, up = format_bytes(received), format_bytes(sent)
    down_value, _, down_unit = down.partition(" ")
    if down_unit and down_unit == up.partition(" ")[2]:
        return f"\u2193{down_value} \u2191{up}/s"
    return format_rate(received, sent)


def _columns(readings: Sequence[GpuReading]) -> list[str]:
    """The live panel's columns for ``readings``: the links only where some GPU reports them."""
    columns = ["GPU", "util", "memory", "temp", "power"]
    if any(r.pcie_rx is not None or r.pcie_tx is not None for r in readings):
        columns.append("PCIe \u2193 \u2191")
    if any(r.nvlink_rx is not None or r.nvlink_tx is not None for r in readings):
        columns.append("NVLink \u2193 \u2191")
    return [*columns, "util, recent"]


def gpu_row(reading: GpuReading, history: Sequence[float | None], columns: Sequence[str], label: str) -> str:
    """One live row, one value per cell in ``columns`` (from ``_columns``); ``label`` names the GPU."""
    uuid = html.escape(reading.uuid or "", quote=True)
    name = f"<td style='{CELL};text-align:left' title='{uuid}'>{html.escape(label)}</td>"
    if reading.error is not None:
        return (
            f"<tr class='gpu-magics-gpu'>{name}<td colspan='{len(columns) + len(BARRED) - 1}' style='{CELL};{MUTED}'>"
            f"{html.escape(reading.error)}</td></tr>"
        )
    memory_percent = (
        100 * reading.memory_used / reading.memory_total
        if reading.memory_used is not None and reading.memory_total
        else None
    )
    cells = {  # a bar and its figure in cells of their own: the bars line up whatever the figures' widths
        "util": f"<td style='{BAR}'>{bar(reading.gpu_util, _GPU_COLOUR, 60)}</td>"
        f"<td style='{RIGHT}'>{format_percent(reading.gpu_util)}</td>",
        "memory": f"<td style='{BAR}'>{bar(memory_percent, _MEMORY_COLOUR, 60)}</td>"
        f"<td style='{RIGHT}'>{html.escape(pair(reading.memory_used, reading.memory_total))}</td>",
        "temp": f"<td style='{RIGHT}'>{format_number(reading.temperature, '°C')}</td>",
        "power": f"<td style='{RIGHT}'>{html.escape(pair(reading.power, reading.power_limit, 'W'))}</td>",
        "PCIe \u2193 \u2191": f"<td style='{RIGHT}' class='gpu-magics-links'>"
        f"{html.escape(rate(reading.pcie_rx, reading.pcie_tx))}</td>",
        "NVLink \u2193 \u2191": f"<td style='{RIGHT}' class='gpu-magics-links'>"
        f"{html.escape(rate(reading.nvlink_rx, reading.nvlink_tx))}</td>",
        "util, recent": f"<td style='{CELL}'>{sparkline(history, _GPU_COLOUR)}</td>",
    }
    return f"<tr class='gpu-magics-gpu'>{name}{''.join(cells[column] for column in columns[1:])}</tr>"


def _head(column: str) -> str:
    """A column's heading, aligned as its figures (over a bar and its figure: both cells)."""
    align = ";text-align:right" if column in FIGURES else ""
    span = " colspan=2" if column in BARRED else ""
    return f"<th style='{HEAD}{align}'{span}>{html.escape(column)}</th>"


def links_line(reading: GpuReading) -> str:
    """``"PCIe ↓1.2 GiB/s ↑0 B/s · NVLink ↓0 B/s ↑0 B/s"``, the links NVML reads on this GPU (read every few
    seconds); empty where it reads neither."""
    links = (("PCIe", reading.pcie_rx, reading.pcie_tx), ("NVLink", reading.nvlink_rx, reading.nvlink_tx))
    return " · ".join(f"{name} {format_rate(rx, tx)}" for name, rx, tx in links if rx is not None or tx is not None)


def host_line(host: HostReading) -> str:
    """CPU and memory of the host, one line."""
    memory_percent = 100 * host.memory_used / host.memory_total if host.memory_used and host.memory_total else None
    return (
        f"<div class='gpu-magics-host' style='white-space:nowrap'>host · {host.cpu_count} CPUs "
        f"{bar(host.cpu_percent, _CPU_COLOUR, 60)} {format_percent(host.cpu_percent)} · memory "
        f"{bar(memory_percent, _MEMORY_COLOUR, 60)} {html.escape(pair(host.memory_used, host.memory_total))}</div>"
    )


def live_panel(snapshots: Sequence[Snapshot], title: str = "GPUs", below_title: str = "") -> str:
    """The live panel for the newest of ``snapshots`` (older ones feed the sparklines); ``below_title`` is
    HTML shown under the title (a running cell's progress). One line per GPU: where every GPU is the same model,
    the title names it once and the rows only their GPU."""
    if not snapshots:
        return (
            f"<div class='gpu-magics-monitor' style='{STYLE}'>{html.escape(title)}: waiting for the first sample…"
            f"{below_title}</div>"
        )
    latest = snapshots[-1]
    readable = [r for r in latest.gpus if r.error is None]
    models = {r.name for r in readable}
    one_model = len(models) == 1 and len(readable) > 1
    if one_model:
        title += f" · {len(readable)}\u00d7 {next(iter(models))}"
    columns = _columns([r for snapshot in snapshots for r in snapshot.gpus])  # a link read once keeps its column
    rows = []
    for reading in latest.gpus:
        history = [_reading_util(s, reading.index) for s in snapshots]
        label = reading.label if one_model and reading.error is None else f"{reading.label} · {reading.name}"
        rows.append(gpu_row(reading, history, columns, label))
    head = "".join(_head(column) for column in columns)
    status = f"<div style='{MUTED}'>{html.escape(latest.status)}</div>" if latest.status else ""
    table = (
        f"<table style='border-collapse:collapse;font-size:inherit'><thead><tr>{head}</tr></thead>"
        f"<tbody>{''.join(rows)}</tbody></table>"
        if rows
        else ""
    )
    return (
        f"<div class='gpu-magics-monitor' style='{STYLE};overflow-x:auto'><b>{html.escape(title)}</b>{below_title}"
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
