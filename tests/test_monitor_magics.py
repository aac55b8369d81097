"""``%gpumonitor`` and the monitor inside ``%%gpurun``, in a real IPython shell with the fake GPU source."""

from __future__ import annotations

import dataclasses
import re
import threading
import time
from collections.abc import Iterator

import pytest
from display_recording import recording
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell

from gpu_magics.display.live import LivePanel
from gpu_magics.gpurun import backends
from gpu_magics.gpurun.live.cell_monitor import CellMonitor, MonitorFigures, figures_from
from gpu_magics.monitor.sampler import Sampler, get_sampler, shutdown_sampler
from gpu_magics.monitor.sources import make_source
from tests.waiting import wait_for


def sampler_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("gpu-magics-sampler")]


@pytest.fixture
def fake_gpus(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The shared sampler reads two fake GPUs."""
    shutdown_sampler()
    monkeypatch.setenv("GPU_MAGICS_SOURCE", "fake:2")
    yield
    shutdown_sampler()


def test_gpumonitor_in_a_terminal_prints_one_snapshot(
    ip: InteractiveShell, fake_gpus: None, capsys: pytest.CaptureFixture[str]
) -> None:
    ip.run_line_magic("gpumonitor", "")
    text = capsys.readouterr().out
    assert "GPU 0" in text and "GPU 1" in text and "host:" in text
    assert sampler_threads() == []


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("--interval 0.05", "expected seconds from 0.1 to 60, got 0.05"),
        ("--interval soon", "expected a number of seconds"),
        ("--interval -1", "expected seconds from 0.1 to 60, got -1"),
        ("--interval 1e9", "expected seconds from 0.1 to 60, got 1e9"),
        ("--stop --interval 1", "--stop takes no --interval"),
        ("--fast", "unrecognized arguments: --fast"),
    ],
)
def test_gpumonitor_bad_input(ip: InteractiveShell, fake_gpus: None, line: str, message: str) -> None:
    with pytest.raises(UsageError) as caught:
        ip.run_line_magic("gpumonitor", line)
    assert message in str(caught.value) and "\n" not in str(caught.value)
    assert sampler_threads() == []


def test_interval_option_sets_the_sampler(ip: InteractiveShell, fake_gpus: None) -> None:
    ip.run_line_magic("gpumonitor", "--interval 0.25")
    assert get_sampler().interval == 0.25


def test_live_panel_updates_in_place_and_stops() -> None:
    sampler = Sampler(make_source("fake", gpus=3), interval=0.1)
    panel = LivePanel(sampler, title="test <b>panel</b>")
    panel.start()
    sampler.start()
    try:
        wait_for(lambda: len(sampler.history()) >= 3, 60, "3 samples")
        first = panel.html()
        assert "GPU 2" in first and "&lt;b&gt;panel&lt;/b&gt;" in first and "<polyline" in first
        count = len(sampler.history())
        wait_for(lambda: len(sampler.history()) > count, 60, "another sample")
        bundle = panel._repr_mimebundle_()
        assert "text/html" in bundle and "GPU 0" in bundle["text/plain"]
    finally:
        panel.stop()
        sampler.close()
    assert not panel.running
    assert sampler_threads() == []


def test_gpumonitor_redraws_one_output_and_stop_leaves_its_last_view(ip: InteractiveShell, fake_gpus: None) -> None:
    with recording(ip) as shown:
        ip.run_line_magic("gpumonitor", "--interval 0.1")
        wait_for(lambda: len(shown.messages) >= 3, 60, "two redraws")
        ip.run_line_magic("gpumonitor", "--stop")
    assert len(shown.messages) >= 3 and all(m.update for m in shown.messages[1:])
    outputs = shown.outputs()
    assert len(outputs) == 1  # redrawn in place: plain HTML and text, no widget model to lose
    (last,) = outputs.values()
    assert set(last) == {"text/plain", "text/html"}
    assert "every 100 ms · stopped" in last["text/html"] and "GPU 1" in last["text/html"]
    assert last["text/plain"].startswith("GPUs (simulated: $GPU_MAGICS_SOURCE) · every 100 ms · stopped")
    assert sampler_threads() == []


def test_stop_and_unload_leave_no_sampler_thread(ip: InteractiveShell, fake_gpus: None) -> None:
    ip.kernel = object()  # a front end that draws widgets
    try:
        ip.run_line_magic("gpumonitor", "--interval 0.1")
        assert len(sampler_threads()) == 2
        ip.run_line_magic("gpumonitor", "--stop")
        assert sampler_threads() == []
        ip.run_line_magic("gpumonitor", "")
        assert sampler_threads()
        ip.run_line_magic("unload_ext", "gpu_magics")
        assert sampler_threads() == []
    finally:
        del ip.kernel
        ip.run_line_magic("load_ext", "gpu_magics")


def test_gpurun_on_cpu_reports_host_cpu(ip: InteractiveShell, fake_gpus: None) -> None:
    ip.run_cell_magic("gpurun", "cpu-threads -q -o t_r", "sum(i * i for i in range(200_000))")
    result = ip.user_ns["t_r"]
    assert isinstance(result.monitor, MonitorFigures)
    assert result.monitor.readings == "host" and result.monitor.samples >= 2
    assert "host CPU" in str(result)
    assert result.to_json()["monitor"]["kind"] == "host"
    assert sampler_threads() == []


def test_no_monitor_option(ip: InteractiveShell, fake_gpus: None) -> None:
    ip.run_cell_magic("gpurun", "cpu-single -q --no-monitor -o t_r", "1")
    assert ip.user_ns["t_r"].monitor is None


def test_cell_monitor_summarizes_the_gpus_a_backend_used(ip: InteractiveShell) -> None:
    sampler = Sampler(make_source("fake", gpus=4), interval=0.1)
    plan = backends.BackendPlan(name="gpu", hardware="1x Fake", chunk_type="cupy", gpu_indices=(1,))
    monitor = CellMonitor(ip, show_live=False, sampler=sampler)
    monitor.start(plan)
    time.sleep(0.35)
    figures = monitor.stop()
    assert figures.readings == "gpu"
    assert [g.index for g in figures.gpus] == [1]
    assert figures.samples >= 2
    times, values = figures.timelines[1]
    assert len(values) == len(times)
    assert len(times) == figures.samples and times == tuple(sorted(times))
    html = figures._repr_html_()
    assert "GPU 1" in html and "<svg" in html and ">peak memory</th>" in html
    assert all("white-space:nowrap" in style for style in re.findall(r"<th style='([^']*)'", html))
    assert re.search(r"<b>[\d.]+ / 140 GiB</b>", html)  # one unit, said once: the column stays narrow
    assert "mean util" in str(figures)
    assert not sampler.running and sampler_threads() == []


def test_figures_from_without_gpus_falls_back_to_host() -> None:
    sampler = Sampler(make_source("fake", gpus=0))
    snapshots = [sampler.tick(), sampler.tick()]
    figures = figures_from(snapshots, "gpu", snapshots[0].time)
    assert figures.gpus == () and "host CPU" in str(figures)


def test_gpumonitor_shows_pcie_and_nvlink(
    ip: InteractiveShell, fake_gpus: None, capsys: pytest.CaptureFixture[str]
) -> None:
    """Both links' throughput per GPU, each way, from the samples the monitor takes anyway (NVLink is a rate of
    counters: a one-off read has none yet, a sampler's second slow read has one)."""
    ip.run_line_magic("gpumonitor", "")
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("GPU ")]
    assert len(lines) == 2 and all(", PCIe \u2193" in line and "/s \u2191" in line for line in lines), lines
    from gpu_magics.display.monitor_view import links_line, live_panel
    from gpu_magics.monitor.models import HostReading, Snapshot

    source = make_source("fake", gpus=1)
    source.read(slow=True)
    time.sleep(0.05)
    readings, _ = source.read(slow=True)
    assert links_line(readings[0]).startswith("PCIe \u2193") and " · NVLink \u2193" in links_line(readings[0])
    html = live_panel([Snapshot(1.0, tuple(readings), HostReading(None, None, None, 1), None)])
    assert ">PCIe \u2193 \u2191</th>" in html and ">NVLink \u2193 \u2191</th>" in html
    assert html.count("class='gpu-magics-links'>\u2193") == 2


def test_a_full_host_cpu_timeline_is_a_line_not_a_filled_block() -> None:
    import re

    from gpu_magics.display.monitor_view import timeline

    chart = timeline([0.0, 1.0, 2.0], [100.0, 100.0, 100.0], "#6b8fb5", width=240, height=36)
    opacities = [float(value) for value in re.findall(r"fill-opacity='([.\d]+)'", chart)]
    assert opacities and max(opacities) <= 0.2  # a light tint under the line, not a solid area
    line = re.search(r"<path d='(M[^']+)' fill='none' stroke='#6b8fb5'", chart)
    assert line is not None
    ys = [float(y) for y in re.findall(r",([\d.]+)", line.group(1))]
    assert ys == [4.0, 4.0, 4.0]  # 100% a few pixels below the frame's top edge, visible as a line


@pytest.mark.parametrize(
    ("times", "values"),
    [
        ([0.0], [100.0]),  # one sample
        ([0.0, 0.5], [None, 100.0]),  # a fresh probe's first read has no CPU figure yet
        ([0.0, 0.0], [98.0, 100.0]),  # both at one moment
        ([0.0, 0.26, 0.52], [96.0, 100.0, 100.0]),
    ],
)
def test_the_host_cpu_chart_draws_a_line_at_any_mean(times: list[float], values: list[float | None]) -> None:
    """A busy cell's chart (mean 96-100%) shows its line across the chart, not an empty box: the line stays
    below the top, which has no frame edge to hide it."""
    import re

    from gpu_magics.display.monitor_view import timeline

    chart = timeline(times, values, "#6b8fb5", width=240, height=36)
    line = re.search(r"<path d='(M[^']+)' fill='none' stroke='#6b8fb5'", chart)
    assert line is not None, chart
    points = [(float(x), float(y)) for x, y in re.findall(r"([\d.]+),([\d.]+)", line.group(1))]
    xs, ys = [x for x, _ in points], [y for _, y in points]
    assert max(xs) - min(xs) >= 200  # across the chart
    assert all(4.0 <= y <= 6.0 for y in ys)  # near the top, 4 px or more below it
    assert "<rect" not in chart  # no frame: a line at 100% is not drawn over its top edge
    assert "stroke-dasharray" in chart  # a dotted 100% mark instead


def test_the_live_panel_names_a_shared_model_once_and_its_cells_do_not_wrap() -> None:
    from gpu_magics.display.monitor_view import live_panel, pair, rate
    from gpu_magics.monitor.models import HostReading, Snapshot

    source = make_source("fake", gpus=4)
    source.read(slow=True)
    time.sleep(0.05)  # NVLink is a rate of counters: the second read has one
    readings, _ = source.read(slow=True)
    html = live_panel([Snapshot(1.0, tuple(readings), HostReading(50.0, 2**30, 8 * 2**30, 2), None)], "GPUs")
    assert "<b>GPUs · 4\u00d7 NVIDIA H200</b>" in html
    assert html.count("<tr class='gpu-magics-gpu'>") == 4 and "GPU 3 · NVIDIA H200" not in html
    cells = re.findall(r"<t[dh] style='([^']*)'", html)
    assert cells and all("white-space:nowrap" in style for style in cells)
    assert "overflow-x:auto" in html  # narrower than the table: it scrolls, never wraps
    assert pair(457.0, 700.0, "W") == "457 / 700 W" and pair(54.8 * 2**30, 140 * 2**30) == "54.8 / 140 GiB"
    assert pair(512 * 2**20, 140 * 2**30) == "512 MiB / 140 GiB" and pair(None, None) == "\u2013"
    assert rate(6.0 * 2**30, 2.5 * 2**30) == "\u21936.0 \u21912.5 GiB/s"
    assert rate(6.0 * 2**30, 2**20) == "\u21936.0 GiB/s \u21911.0 MiB/s"
    later = tuple(dataclasses.replace(r, nvlink_rx=None, nvlink_tx=None) for r in readings)  # between slow reads
    host = HostReading(None, None, None, 2)
    kept = live_panel([Snapshot(1.0, tuple(readings), host, None), Snapshot(1.5, later, host, None)], "GPUs")
    assert ">NVLink \u2193 \u2191</th>" in kept  # the column stays while its reads are in the history
    mixed = [readings[0], dataclasses.replace(readings[1], name="NVIDIA A100")]
    html = live_panel([Snapshot(1.0, tuple(mixed), HostReading(None, None, None, 2), None)], "GPUs")
    assert "GPU 0 · NVIDIA H200" in html and "GPU 1 · NVIDIA A100" in html and "\u00d7" not in html
