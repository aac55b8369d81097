"""Watching a ``%%gpurun`` cell: the live panel while it runs, then per-GPU (or host) figures for the summary."""

from __future__ import annotations

import heapq
import html
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, cast

from IPython.core.interactiveshell import InteractiveShell
from IPython.display import DisplayHandle

from gpu_magics.display.format import DASH, MUTED, STYLE, format_bytes, format_percent, format_seconds
from gpu_magics.display.monitor_view import pair, timeline
from gpu_magics.gpurun.backends import BackendPlan
from gpu_magics.monitor.models import Snapshot
from gpu_magics.monitor.sampler import GpuSummary, Sampler, get_sampler, summarize
from gpu_magics.text.units import dropped

QUIET_SAMPLING_AFTER_S = 0.3
"""A quiet cell (``-q``, no live panel, no ``-o``) is sampled only once it has run this long: a short one costs
nothing."""
SETTLE_AFTER_S = 0.5
"""A quiet cell that ran at least this long waits (bounded) for its cluster's reports that cover its end; a shorter
one uses the latest reports rather than asking every worker (a cell that shows its figures always waits)."""


@dataclass(frozen=True)
class MonitorFigures:
    """What the monitor saw during one backend's run: per GPU, or the host's CPU for CPU backends."""

    readings: str  # "gpu" or "host": what the monitor read
    duration: float
    gpus: tuple[GpuSummary, ...] = ()
    timelines: dict[int, tuple[tuple[float, ...], tuple[float | None, ...]]] = field(default_factory=dict)
    host_mean_cpu: float | None = None
    host_peak_cpu: float | None = None
    host_timeline: tuple[tuple[float, ...], tuple[float | None, ...]] = ((), ())
    samples: int = 0
    status: str | None = None

    def __str__(self) -> str:
        if self.readings == "host" or not self.gpus:
            text = f"host CPU: mean {format_percent(self.host_mean_cpu)}, peak {format_percent(self.host_peak_cpu)}"
            return text + (f" ({self.status})" if self.status and self.readings == "gpu" else "")
        return "\n".join(
            f"{g.label or f'GPU {g.index}'}: mean util {format_percent(g.mean_gpu_util)}, "
            f"peak memory {format_bytes(g.peak_memory_used)}{links_text(g)}"
            for g in self.gpus
        )

    def short_html(self) -> str:
        """The figures without charts, one line per GPU."""
        return "<br>".join(html.escape(line) for line in str(self).splitlines())

    def _repr_html_(self) -> str:
        footer = f"{self.samples} samples over {format_seconds(self.duration)}"
        if self.readings == "host" or not self.gpus:
            times, values = self.host_timeline
            chart = timeline(times, values, "#6b8fb5") if times else ""
            status = f" ({html.escape(self.status)})" if self.status and self.readings == "gpu" else ""
            return (
                f"<div class='gpu-magics-cell-monitor' style='{STYLE}'>host CPU: mean "
                f"<b>{format_percent(self.host_mean_cpu)}</b>, peak <b>{format_percent(self.host_peak_cpu)}</b>"
                f"{status} {chart} <span style='{MUTED}'>{footer}</span></div>"
            )
        links = [name for name in ("PCIe", "NVLink") if any(_link(gpu, name)[0] is not None for gpu in self.gpus)]
        header = ["GPU", "mean util", "peak memory", *(f"{name} peak (mean)" for name in links), "util"]
        cell = "padding:1px 8px 1px 0;white-space:nowrap"
        right, left = f"{cell};text-align:right", f"{cell};text-align:left"  # as said: JupyterLab's are right
        head = "".join(
            f"<th style='{left if k in (0, len(header) - 1) else right};font-weight:normal;{MUTED}'>"
            f"{html.escape(name)}</th>"
            for k, name in enumerate(header)
        )
        rows = []
        for gpu in self.gpus:
            times, values = self.timelines.get(gpu.index, ((), ()))
            label = gpu.label or f"GPU {gpu.index}"
            name = html.escape(f"{label} · {gpu.name}")
            figures = [
                f"<td style='{right}'><b>{format_percent(gpu.mean_gpu_util)}</b></td>",
                f"<td style='{right}'><b>{html.escape(pair(gpu.peak_memory_used, gpu.memory_total))}</b></td>",
                *(
                    f"<td style='{right}' class='gpu-magics-links'>{html.escape(_link_text(gpu, k))}</td>"
                    for k in links
                ),
            ]
            chart = timeline(times, values, "#76b900", height=24) if times else ""
            rows.append(
                f"<tr><td style='{left}'>{name}</td>"
                + "".join(figures)
                + f"<td style='padding:1px 0'>{chart}</td></tr>"
            )
        return (
            f"<div class='gpu-magics-cell-monitor' style='{STYLE};overflow-x:auto'>"
            f"<table style='border-collapse:collapse;font-size:inherit'><thead><tr>{head}</tr></thead>"
            f"<tbody>{''.join(rows)}</tbody></table><span style='{MUTED}'>{footer}</span></div>"
        )

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(str(self))

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.readings,  # the results' JSON keeps its key
            "duration": self.duration,
            "samples": self.samples,
            "gpus": [g.to_json() for g in self.gpus],
            "timelines": {str(i): {"t": list(t), "util": list(v)} for i, (t, v) in self.timelines.items()},
            "host_mean_cpu": self.host_mean_cpu,
            "host_peak_cpu": self.host_peak_cpu,
            "status": self.status,
        }


def _link(gpu: GpuSummary, name: str) -> tuple[float | None, float | None]:
    """The peak and mean throughput of link ``name`` (PCIe, NVLink) during the cell."""
    return (gpu.peak_pcie, gpu.mean_pcie) if name == "PCIe" else (gpu.peak_nvlink, gpu.mean_nvlink)


def _link_text(gpu: GpuSummary, name: str) -> str:
    """``"12.0 GiB/s (4.1 GiB/s)"``: a link's peak and, in brackets, its mean; an en dash where not read."""
    peak, mean = _link(gpu, name)
    return DASH if peak is None else f"{format_bytes(peak)}/s ({format_bytes(mean)}/s)"


def links_text(gpu: GpuSummary) -> str:
    """``", PCIe peak 12.0 GiB/s (mean 4.1 GiB/s), NVLink peak 0 B/s (mean 0 B/s)"``: the links' throughput
    during the cell, both ways; empty where NVML reads neither."""
    parts = [
        f"{name} peak {format_bytes(peak)}/s (mean {format_bytes(mean)}/s)"
        for name, peak, mean in (("PCIe", gpu.peak_pcie, gpu.mean_pcie), ("NVLink", gpu.peak_nvlink, gpu.mean_nvlink))
        if peak is not None
    ]
    return "".join(f", {part}" for part in parts)


def figures_from(
    snapshots: list[Snapshot], readings: str, start: float, gpu_indices: tuple[int, ...] = ()
) -> MonitorFigures:
    """Summarize the snapshots of one run; ``gpu_indices`` limits the GPUs shown (empty: all)."""
    end = snapshots[-1].time if snapshots else start
    cpu = [s.host.cpu_percent for s in snapshots]
    present = [c for c in cpu if c is not None]
    host_times = tuple(s.time - start for s in snapshots)
    status = next((s.status for s in reversed(snapshots) if s.status), None)
    base = MonitorFigures(
        readings=readings,
        duration=max(0.0, end - start),
        host_mean_cpu=sum(present) / len(present) if present else None,
        host_peak_cpu=max(present) if present else None,
        host_timeline=(host_times, tuple(cpu)),
        samples=len(snapshots),
        status=status,
    )
    if readings != "gpu":
        return base
    summaries = summarize(snapshots)
    wanted = [summaries[i] for i in sorted(summaries) if not gpu_indices or i in gpu_indices]
    timelines = {}
    for gpu in wanted:
        points = [(s.time - start, r.gpu_util) for s in snapshots for r in s.gpus if r.index == gpu.index]
        timelines[gpu.index] = (tuple(p[0] for p in points), tuple(p[1] for p in points))
    return MonitorFigures(**{**base.__dict__, "gpus": tuple(wanted), "timelines": timelines})


def within_cell(snapshots: list[Snapshot], end: float) -> list[Snapshot]:
    """The snapshots of a cell that ended at ``end``: those before it and the first at or after it (its
    readings cover the cell's last moments); later ones belong to what came after."""
    kept = [s for s in snapshots if s.time < end]
    after = [s for s in snapshots if s.time >= end]
    return kept + after[:1]


def _cluster_gpus(plan: BackendPlan) -> tuple[Sampler | None, tuple[int, ...]]:
    """For a cell on a cluster whose workers report GPUs: where to read them, and which to show. GPUs this
    machine has are read here, at the sampler's finer rate (only those the workers use); when some are on
    other hosts, all come from the workers' reports. ``(None, plan.gpu_indices)`` otherwise."""
    if plan.client is None:
        return None, plan.gpu_indices
    from gpu_magics.cluster.control import queries

    telemetry = queries.telemetry()
    if telemetry is None or telemetry.client is not plan.client:
        return None, plan.gpu_indices
    used = telemetry.gpus()
    if not used:
        return None, plan.gpu_indices
    if all(gpu.host_label is None for gpu in used):
        return None, tuple(sorted(gpu.key for gpu in used))
    return cast(Sampler, telemetry.feed()), ()  # the sampler's interface, as the live panel and history use it


class _Later:
    """One daemon thread that calls functions when they are due (a thread per cell would cost its start)."""

    def __init__(self) -> None:
        self._due: list[tuple[float, int, Callable[[], None]]] = []
        self._changed = threading.Condition()
        self._count = 0
        self._thread: threading.Thread | None = None

    def call(self, delay: float, function: Callable[[], None]) -> None:
        with self._changed:
            self._count += 1
            heapq.heappush(self._due, (time.monotonic() + delay, self._count, function))
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="gpu-magics-later", daemon=True)
                self._thread.start()
            self._changed.notify()

    def _run(self) -> None:
        while True:
            with self._changed:
                while not self._due or self._due[0][0] > time.monotonic():
                    self._changed.wait(self._due[0][0] - time.monotonic() if self._due else None)
                _, _, function = heapq.heappop(self._due)
            try:
                function()
            except Exception as error:  # a job never stops the timer thread
                dropped("a job of the cell monitor's timer", error)


later = _Later()
"""The cell monitor's timer, shared by what watches a cell (a plain cell's progress line too)."""


class CellMonitor:
    """A ``run.CellObserver``: samples while one backend runs the cell, with a live panel in a notebook."""

    def __init__(
        self,
        shell: InteractiveShell,
        *,
        show_live: bool = True,
        keep_static: bool = True,
        sampler: Sampler | None = None,
        lazy: bool = False,
    ) -> None:
        self.shell = shell
        self.lazy = lazy  # sample only once the cell has run a while (a quiet cell whose figures nobody keeps)
        self.show_live = show_live
        self.keep_static = keep_static
        self._sampler = sampler
        self._gpu_indices: tuple[int, ...] = ()
        self._started_here = False
        self._start = 0.0
        self._plan: BackendPlan | None = None
        self._panel: Any = None
        self._handle: DisplayHandle | None = None
        self._lock = threading.Lock()
        self._sampling = False  # whether this cell's run is sampled (a quiet cell: once it ran a while)
        self._stopped = False

    def start(self, plan: BackendPlan) -> None:
        feed, self._gpu_indices = _cluster_gpus(plan)
        sampler = self._sampler = feed or self._sampler or get_sampler()
        self._plan = plan
        self._start = time.time()
        self._stopped = False
        if not self.lazy or self.show_live or sampler.running:
            self._begin_sampling()
        else:  # a quiet cell costs nothing to watch until it has run a while
            later.call(QUIET_SAMPLING_AFTER_S, self._begin_sampling)
        from gpu_magics.display.live import LivePanel, can_show_widgets
        from gpu_magics.gpurun.live.progress import Progress

        if self.show_live and can_show_widgets(self.shell):
            progress = Progress(plan.client)
            progress.start()
            self._panel = LivePanel(sampler, title=f"{plan.name} · {plan.hardware}", progress=progress)
            self._handle = self._panel.show()
            self._panel.start()

    def _begin_sampling(self) -> None:
        sampler = self._sampler
        assert sampler is not None
        with self._lock:
            if self._stopped or self._sampling:
                return
            self._started_here = not sampler.running
            if self._started_here:
                sampler.start()
            self._sampling = True
        sampler.tick()

    def stop(self) -> MonitorFigures:
        sampler, plan = self._sampler, self._plan
        assert sampler is not None and plan is not None, "stop() before start()"
        with self._lock:
            self._stopped = True  # a call still due finds it stopped
        end = time.time()
        snapshots: list[Snapshot] = []
        if self._sampling:
            settle = getattr(sampler, "settle", None)  # a cluster's reports come later than the cell's end
            if callable(settle) and (not self.lazy or end - self._start >= SETTLE_AFTER_S):  # short, quiet: latest
                settle(end)
            sampler.tick()
            snapshots = within_cell(sampler.history(since=self._start - 1e-3), end)
        if self._started_here:
            sampler.stop()
        uses_gpu = plan.chunk_type == "cupy"
        figures = figures_from(snapshots, "gpu" if uses_gpu else "host", self._start, self._gpu_indices)
        if self._panel is not None:
            self._panel.stop()
        if self._handle is not None:
            if self.keep_static:
                self._handle.update(figures)
            else:  # the comparison table is the summary: leave nothing behind, in HTML or in text
                self._handle.update({"text/plain": "", "text/html": ""}, raw=True)
        return figures
