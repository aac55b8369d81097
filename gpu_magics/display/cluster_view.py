"""The ``%gpucluster`` display: the cluster's state and uptime, one row per worker GPU grouped by host, the
dashboard link; HTML and plain-text forms, so a saved notebook still shows it. It renders
``cluster.info.ClusterInfo``, plain data built by the cluster engine."""

from __future__ import annotations

import html
import re
import time
from collections import Counter
from typing import Any

from gpu_magics.cluster.info import ClusterInfo, JobInfo, WorkerGpu, WorkerInfo
from gpu_magics.display.format import (
    DASH,
    ERROR,
    MUTED,
    STATUS_COLOURS,
    STYLE,
    WARN,
    format_age,
    format_bytes,
    format_clock,
    format_duration,
    format_percent,
    format_seconds,
    html_table,
    text_table,
)

HEADER = ("host", "worker", "GPU", "util", "memory", "worker holds", "arrays", "cached", "context", "status", "threads")
NUMERIC = (3, 4, 5, 6, 7, 8, 10)
OTHERS = "others"
"""The marker of a GPU on which processes that are not this cluster's (nor this kernel's) hold memory."""
STALE_FIGURES_S = 2.0
"""GPU figures reported longer ago than this are said to be that old."""
FRESH_S = 10.0
"""A cluster younger than its start-up time plus this many seconds shows how its start went; older ones show
their uptime only."""


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


def gpu_text(gpu: WorkerGpu, host: str | None) -> str:
    """``"GPU 1 · NVIDIA H200"``: the GPU's label without the host its row is grouped under, and its name."""
    label = gpu.label
    if host and label.startswith(f"{host} · "):
        label = label[len(host) + 3 :]
    return f"{label} · {gpu.name}" if gpu.name and gpu.name not in label else label


def job_text(job: JobInfo) -> str:
    """``"job 4242 running on gpu-node-3 · workers slurm-0-0, slurm-0-1 · GPUs NVIDIA H100 (...)"``, or
    ``"job 4243 pending (Resources)"``."""
    text = f"job {job.job_id} {job.state}"
    if job.node:
        text += f" on {job.node}"
    if job.reason:
        text += f" ({job.reason})"
    if job.workers:
        text += " \u00b7 workers " + ", ".join(job.workers)
    if job.gpus:
        text += " \u00b7 GPUs " + ", ".join(job.gpus)
    return text


PROG_FREE = "%gpucluster free"


def others_text(memory: int, pids: tuple[int, ...]) -> str:
    """``"pid 4242 holds 40.0 GiB"``, ``"2 other processes hold 40.0 GiB (pid 4242, 4343)"``, or, where NVML
    cannot name them, ``"40.0 GiB in use that no process of yours reports"``."""
    if not pids:
        return f"{format_bytes(memory)} in use that no process of yours reports"
    if len(pids) == 1:
        return f"pid {pids[0]} holds {format_bytes(memory)}"
    listed = ", ".join(str(pid) for pid in pids[:4]) + (", ..." if len(pids) > 4 else "")
    return f"{len(pids)} other processes hold {format_bytes(memory)} (pid {listed})"


OPAQUE_NAME = re.compile(r"[0-9a-f]{24,}|[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}")
"""A worker name that is only an id (a Dask Gateway worker's 32 hex digits, a UUID): shown as ``worker N``."""


def readable_names(workers: tuple[WorkerInfo, ...]) -> dict[str, str]:
    """Worker name -> the name shown: its own where it reads as a name, else ``worker 1``, ``worker 2``... in the
    order of their addresses (the id stays in the name's tooltip)."""
    opaque = sorted((w for w in workers if OPAQUE_NAME.fullmatch(w.name)), key=lambda w: w.address)
    shown = {w.name: w.name for w in workers}
    shown.update({w.name: f"worker {number}" for number, w in enumerate(opaque, 1)})
    return shown


def _state(workers: tuple[WorkerInfo, ...]) -> str:
    """``"4 workers running"``, ``"3 workers: 2 running, 1 paused"`` or ``"no workers"``."""
    if not workers:
        return "no workers"
    counts = Counter(w.status for w in workers)
    noun = f"{len(workers)} worker{'s' if len(workers) != 1 else ''}"
    if len(counts) == 1:
        return f"{noun} {next(iter(counts))}"
    return f"{noun}: " + ", ".join(f"{n} {status}" for status, n in counts.most_common())


class ClusterView:
    """Rich display of a ``ClusterInfo``; ``now`` (seconds since the epoch) is the moment its uptime is told at."""

    def __init__(self, info: ClusterInfo, now: float | None = None) -> None:
        self.info = info
        self.now = time.time() if now is None else now

    def _headline(self) -> str:
        info = self.info
        source = info.facts.source if info.facts is not None else None
        return f"Cluster {info.name!r}: {info.hardware}" + (f", {source}" if source else "")

    def _state_line(self) -> str:
        """``"4 workers running · up since 14:03:12"``: when it started, which a saved output keeps true."""
        info = self.info
        state = _state(info.workers)
        if info.up_since is not None:  # a running cluster this kernel connected to: its own age
            line = f"{state} · up since {format_clock(info.up_since, self.now)}"
        elif info.started_at is None:
            return state
        else:
            verb = info.facts.taken if info.facts is not None else "up since"
            line = f"{state} · {verb} {format_clock(info.started_at, self.now)}"
        if info.adaptive is not None:
            line += f" \u00b7 adapts between {info.adaptive[0]} and {info.adaptive[1]} workers"
        return line

    def _startup(self) -> str | None:
        """How the start went, only while the cluster is fresh (``%gpucluster status`` later does not repeat it)."""
        info = self.info
        if info.ready_s is None:
            return None
        took = info.ready_s + (info.warm_s or 0.0)
        if info.started_at is not None and self.now - info.started_at > took + FRESH_S:
            return None
        if info.up_since is not None:  # it was running: the figures are this kernel's connection to it
            return f"connected in {format_seconds(took)}"
        if info.facts is not None and not info.facts.owned:  # adopted or attached: when is its state line's
            return None
        if info.warm_s is None:
            return f"workers ready in {format_seconds(info.ready_s)}"
        return (
            f"started in {format_seconds(took)} (workers ready {format_seconds(info.ready_s)}, "
            f"warm-up {format_seconds(info.warm_s)})"
        )

    def _rows(self) -> list[tuple[list[str], WorkerInfo, WorkerGpu | None]]:
        """Table rows (text cells) grouped by host, one per worker GPU (or per worker without GPU data), each
        with its worker and GPU; a worker's and a host's name show on their first row only."""
        rows: list[tuple[list[str], WorkerInfo, WorkerGpu | None]] = []
        previous_host: str | None = None
        names = readable_names(self.info.workers)
        for worker in sorted(self.info.workers, key=lambda w: (w.host or "", names[w.name], w.name)):
            host = worker.host or DASH
            first = [host if host != previous_host else "", names[worker.name]]
            previous_host = host
            last = [worker.status, str(worker.threads)]
            if not worker.gpus:
                cells = [worker_gpu_text(worker), DASH, worker_memory_text(worker), DASH, DASH, DASH, DASH]
                rows.append(([*first, *cells, *last], worker, None))
            for k, gpu in enumerate(worker.gpus):
                if gpu.error is not None:
                    figures = ["unreadable", DASH, DASH, DASH, DASH, DASH]
                else:
                    memory = f"{format_bytes(gpu.memory_used)} / {format_bytes(gpu.memory_total)}"
                    held = (gpu.process_memory, gpu.array_memory, gpu.cached_memory, gpu.context_memory)
                    figures = [format_percent(gpu.gpu_util), memory, *(format_bytes(n) for n in held)]
                marker = f" [{OTHERS}]" if gpu.others_memory is not None else ""
                cells = [gpu_text(gpu, worker.host) + marker, *figures]
                rows.append(([*first, *cells, *last] if k == 0 else ["", "", *cells, "", ""], worker, gpu))
        return rows

    def text(self) -> str:
        """The plain-text form."""
        info = self.info
        lines = [] if info.notice is None else [info.notice]
        lines += [self._headline(), self._state_line(), f"scheduler: {info.scheduler_address}"]
        lines.append(f"dashboard: {info.dashboard_url or 'off'}")
        if info.dashboard_note:
            lines.append(f"  {info.dashboard_note}")
        if info.plain_cells:
            lines.append(info.plain_cells)
        startup = self._startup()
        if startup:
            lines.append(startup)
        lines += [line for line in (self._idle_line(), self._park_line()) if line]
        rows = self._rows()
        if rows:
            keep = _columns(rows)
            body = [
                [
                    f"unreadable ({gpu.error})" if gpu and gpu.error and cells[i] == "unreadable" else cells[i]
                    for i in keep
                ]
                for cells, _, gpu in rows
            ]
            header, numeric = _header(keep)
            lines += text_table(header, body, numeric)
        lines += [job_text(job) for job in info.jobs]
        lines += self._notes()
        return "\n".join(lines)

    def _idle_line(self) -> str | None:
        """``"closes after 30 min without a task · idle now: 25 min left"``."""
        info = self.info
        if info.idle_timeout is None:
            return None
        verb = "detaches" if info.facts is not None and info.facts.ends == "detach" else "closes"
        line = f"{verb} after {format_duration(info.idle_timeout)} without a task"
        if info.idle_left is not None:
            line += f" \u00b7 idle now: {format_duration(info.idle_left)} left"
        return line

    def _park_line(self) -> str | None:
        """``"parks its workers after 5 min without a task (ClusterMagics.park_after) · idle now: 4 min left"``."""
        info = self.info
        if info.park_after is None:
            return None
        line = f"parks its workers after {format_duration(info.park_after)} without a task (ClusterMagics.park_after)"
        if info.parked:
            return line + " \u00b7 parked now"
        if info.park_left is not None:
            line += f" \u00b7 idle now: {format_duration(info.park_left)} left"
        return line

    def _notes(self) -> list[str]:
        """Under the table: how old the GPU figures are (when the workers were slow to report), GPUs that
        others use too, and what this kernel holds itself."""
        notes = []
        age = self.info.figures_age
        if age is not None and age > STALE_FIGURES_S and any(worker.gpus for worker in self.info.workers):
            notes.append(f"GPU figures as of {format_age(self.now - age, self.now)} ago (the workers' last reports)")
        for worker in self.info.workers:
            for gpu in worker.gpus:
                if gpu.others_memory is None:
                    continue
                who = others_text(gpu.others_memory, gpu.others_pids)
                notes.append(f"{gpu.label}: busy with work that is not this cluster's or this kernel's: {who}")
        for held in self.info.kernel_gpus:
            named = (("arrays", held.array_memory), ("cached", held.cached_memory), ("context", held.context_memory))
            figures = [f"{name} {format_bytes(value)}" for name, value in named if value is not None]
            what = " \u00b7 ".join(figures) if figures else f"{format_bytes(held.process_memory)} in all"
            hint = f" ({PROG_FREE} gives the cached memory back)" if held.cached_memory else ""
            notes.append(f"this kernel holds on {held.label}: {what}{hint}")
        return notes

    def html(self) -> str:
        """The HTML form (every string from the cluster escaped)."""
        info = self.info
        esc = html.escape
        parts = [f'<div class="gpu-magics-cluster" style="{STYLE}">']
        if info.notice:
            parts.append(f'<div style="margin:0 0 4px 0"><em>{esc(info.notice)}</em></div>')
        parts.append(f"<div><strong>{esc(self._headline())}</strong></div><div>{esc(self._state_line())}</div>")
        parts.append(f"<div>scheduler <code>{esc(info.scheduler_address)}</code> &middot; dashboard ")
        parts.append(_link(info.dashboard_url) if info.dashboard_url else "off")
        parts.append("</div>")
        if info.dashboard_note:
            parts.append(f'<div style="{MUTED}">{esc(info.dashboard_note)}</div>')
        if info.plain_cells:
            colour = f"color:{WARN}" if info.plain_cells_idle_gpus else ""
            parts.append(f'<div class="gpu-magics-plain-cells" style="{colour}">{esc(info.plain_cells)}</div>')
        startup = self._startup()
        if startup:
            parts.append(f'<div style="{MUTED}">{esc(startup)}</div>')
        for kind, line in (("idle", self._idle_line()), ("park", self._park_line())):
            if line:
                parts.append(f'<div class="gpu-magics-{kind}" style="{MUTED}">{esc(line)}</div>')
        rows = self._rows()
        if rows:
            keep = _columns(rows)
            cells = [[_cell(i, texts[i], worker, gpu) for i in keep] for texts, worker, gpu in rows]
            header, numeric = _header(keep)
            parts.append(html_table(header, cells, numeric))
        for job in info.jobs:
            parts.append(f'<div class="gpu-magics-job">{esc(job_text(job))}</div>')
        for note in self._notes():
            colour = f"color:{WARN}" if "busy with work" in note else MUTED
            parts.append(f'<div style="{colour}">{esc(note)}</div>')
        parts.append("</div>")
        return "".join(parts)

    def _repr_html_(self) -> str:
        return self.html()

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, str]:
        return {"text/plain": self.text(), "text/html": self.html()}

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(self.text())

    def __repr__(self) -> str:
        return self.text()


def _columns(rows: list[tuple[list[str], WorkerInfo, WorkerGpu | None]]) -> list[int]:
    """The columns worth showing: the worker's name, status and threads, and any other with something known
    (a CPU cluster has no GPU columns, a cluster without host data no host column)."""
    always = {HEADER.index("worker"), HEADER.index("status"), HEADER.index("threads")}
    return [i for i in range(len(HEADER)) if i in always or any(cells[i] not in ("", DASH) for cells, _, _ in rows)]


def _header(keep: list[int]) -> tuple[tuple[str, ...], tuple[int, ...]]:
    """The kept columns' names, and which of them hold numbers."""
    return tuple(HEADER[i] for i in keep), tuple(k for k, i in enumerate(keep) if i in NUMERIC)


def _cell(column: int, text: str, worker: WorkerInfo, gpu: WorkerGpu | None) -> str:
    """One table cell's HTML: status words in the theme's colours, an unreadable GPU with its reason, the
    worker's address on hover."""
    escaped = html.escape(text)
    if HEADER[column] == "worker" and text:
        where = worker.address if text == worker.name else f"{worker.name} at {worker.address}"
        return f'<span title="{html.escape(where, quote=True)}">{escaped}</span>'
    if HEADER[column] == "status" and text:
        colour = STATUS_COLOURS.get(text)
        return f'<span style="color:{colour}">{escaped}</span>' if colour else escaped
    if HEADER[column] == "util" and gpu is not None and gpu.error is not None:
        return f'<span style="color:{ERROR}" title="{html.escape(gpu.error, quote=True)}">{escaped}</span>'
    if HEADER[column] == "GPU" and gpu is not None:
        name = html.escape(text.removesuffix(f" [{OTHERS}]"))
        cell = f'<span title="{html.escape(gpu.uuid, quote=True)}">{name}</span>'
        if gpu.others_memory is not None:
            why = html.escape(others_text(gpu.others_memory, gpu.others_pids), quote=True)
            style = f"color:{WARN};font-weight:600"
            cell += f' <span class="gpu-magics-others" style="{style}" title="{why}">{OTHERS}</span>'
        return cell
    return escaped


class DashboardLink:
    """A clickable dashboard address (``%gpucluster dashboard``), with why it may not open, if known."""

    def __init__(self, url: str, note: str | None = None) -> None:
        self.url = url
        self.note = note

    def _repr_html_(self) -> str:
        note = f'<div style="{MUTED}">{html.escape(self.note)}</div>' if self.note else ""
        return f'<div style="{STYLE}">Dask dashboard: {_link(self.url)}{note}</div>'

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, str]:
        return {"text/plain": repr(self), "text/html": self._repr_html_()}

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(repr(self))

    def __repr__(self) -> str:
        return f"Dask dashboard: {self.url}" + (f"\n  {self.note}" if self.note else "")


def _link(url: str) -> str:
    text = html.escape(url)
    if not url.startswith(("http://", "https://")):
        return f"<code>{text}</code>"
    return f'<a href="{html.escape(url, quote=True)}" target="_blank" rel="noopener">{text}</a>'
