"""``%gpumonitor``: a live GPU panel in the notebook, fed by the process's shared sampler."""

from __future__ import annotations

import argparse
from typing import cast

from IPython.core.interactiveshell import InteractiveShell
from IPython.core.magic import Magics, line_magic, magics_class

from gpu_magics.display.format import format_seconds
from gpu_magics.display.monitor_view import live_panel_text
from gpu_magics.monitor.sampler import MIN_INTERVAL, Sampler, get_sampler, shutdown_sampler
from gpu_magics.monitor.sources import source_from_env
from gpu_magics.text.argparsing import MagicArgumentParser
from gpu_magics.text.errors import LineError, said_in_one_line

MOST_INTERVAL = 60.0  # seconds: a live panel slower than this is no live panel


def interval_seconds(text: str) -> float:
    """``--interval``: seconds between samples, from ``MIN_INTERVAL`` (NVML cannot be sampled usefully faster) to
    ``MOST_INTERVAL``."""
    try:
        seconds = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if not MIN_INTERVAL <= seconds <= MOST_INTERVAL:
        raise argparse.ArgumentTypeError(
            f"expected seconds from {MIN_INTERVAL:g} to {MOST_INTERVAL:g}, got {text} (NVML cannot be sampled "
            "usefully faster; a panel slower than a minute is no live panel)"
        )
    return seconds


def _parser() -> MagicArgumentParser:
    parser = MagicArgumentParser("%gpumonitor")
    parser.add_argument("--interval", "-i", type=interval_seconds)
    parser.add_argument("--stop", action="store_true")
    return parser.described(globals())


@magics_class
class MonitorMagics(Magics):
    """Live GPU monitoring."""

    def __init__(self, shell: InteractiveShell | None = None, **kwargs: object) -> None:
        super().__init__(shell=shell, **kwargs)
        self._panels: list[object] = []
        self._parser = _parser()

    @line_magic
    @said_in_one_line
    def gpumonitor(self, line: str = "") -> None:
        """Show a live panel of every GPU: utilization, memory, temperature, power and recent history.

        Usage::

            %gpumonitor                  start sampling and show the panel (updates in place)
            %gpumonitor --interval 0.25  sample every 0.25 s (from 0.1 s to 60 s; default 0.5 s)
            %gpumonitor --stop           stop the panels and the sampler thread

        ``-i`` is short for ``--interval``.

        When the cluster in use (``%gpucluster``) has GPUs on other hosts, a second panel shows them, as its
        workers report them ("gpu-node-1 · GPU 2"); on a machine without GPUs, only that one. The host's CPU and
        memory use are shown beneath this machine's GPUs. The panel is plain HTML redrawn in place, so
        a saved notebook shows its last view; ``--stop`` freezes it. In a terminal IPython, which cannot redraw
        outputs, it prints one snapshot instead. GPUs that cannot be read (no driver, no permission, a lost
        GPU) are listed with the reason; the others keep updating.
        """
        args = self._parser.parse_line(line)
        if args.stop:
            if args.interval is not None:
                raise LineError("%gpumonitor: --stop takes no --interval.")
            self.close()
            return
        sampler = get_sampler()
        if args.interval is not None:
            sampler.interval = args.interval
        from gpu_magics.display.live import LivePanel, can_show_widgets

        simulated = " (simulated: $GPU_MAGICS_SOURCE)" if source_from_env().simulated else ""
        here = sampler.tick()
        cluster = _cluster_elsewhere()
        if not can_show_widgets(self.shell):
            if simulated:
                print(f"GPUs{simulated}")
            if here.gpus or cluster is None:
                print(live_panel_text(here))
            if cluster is not None:
                print(cluster[1])
                print(live_panel_text(cluster[0].tick()))
            return
        if here.gpus or cluster is None:  # this machine's GPUs, unless it has none and a cluster has some
            sampler.start()
            panel = LivePanel(sampler, title=f"GPUs{simulated} · every {format_seconds(sampler.interval)}")
            panel.show(in_slot=False)
            panel.start()
            self._panels.append(panel)
        if cluster is not None:
            feed, title = cluster
            feed.tick()
            remote = LivePanel(feed, title=title)
            remote.show(in_slot=False)
            remote.start()
            self._panels.append(remote)

    def close(self) -> None:
        """Stop every panel, leaving its last view in place, and the sampler thread (``--stop``, ``%unload_ext``)."""
        from gpu_magics.display.live import LivePanel

        for panel in self._panels:
            if isinstance(panel, LivePanel):
                panel.stop()
                if panel.handle is not None:
                    panel.handle.update(panel.snapshot())
        self._panels.clear()
        shutdown_sampler()


def _cluster_elsewhere() -> tuple[Sampler, str] | None:
    """The GPUs the cluster in use has on other hosts (its workers' reports) and a title, or ``None``."""
    from gpu_magics.cluster.control import queries

    telemetry = queries.telemetry()
    current = queries.active()
    if telemetry is None or current is None:
        return None
    used = telemetry.gpus()
    if not any(gpu.host_label is not None for gpu in used):
        return None
    hosts = {gpu.host for gpu in used}
    where = f"on {len(hosts)} hosts" if len(hosts) > 1 else f"on {next(iter(hosts))}"
    title = f"cluster {current.name!r} · {len(used)} GPUs {where} · every {format_seconds(telemetry.interval)}"
    return cast(Sampler, telemetry.feed()), title
