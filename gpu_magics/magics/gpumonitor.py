"""``%gpumonitor``: a live GPU panel in the notebook, fed by the process's shared sampler."""

from __future__ import annotations

from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell
from IPython.core.magic import Magics, line_magic, magics_class

from gpu_magics.argparsing import MagicArgumentParser, positive_float
from gpu_magics.display.format import format_seconds
from gpu_magics.display.monitor_view import live_panel_text
from gpu_magics.monitor.sampler import MIN_INTERVAL, get_sampler, shutdown_sampler
from gpu_magics.monitor.sources import source_from_env


def _parser() -> MagicArgumentParser:
    parser = MagicArgumentParser("%gpumonitor")
    parser.add_argument("--interval", "-i", type=positive_float)
    parser.add_argument("--stop", action="store_true")
    return parser


@magics_class
class MonitorMagics(Magics):
    """Live GPU monitoring."""

    def __init__(self, shell: InteractiveShell | None = None, **kwargs: object) -> None:
        super().__init__(shell=shell, **kwargs)
        self._panels: list[object] = []
        self._parser = _parser()

    @line_magic
    def gpumonitor(self, line: str = "") -> None:
        """Show a live panel of every GPU: utilization, memory, temperature, power and recent history.

        Usage::

            %gpumonitor                  start sampling and show the panel (updates in place)
            %gpumonitor --interval 0.25  sample every 0.25 s (at least 0.1 s; default 0.5 s)
            %gpumonitor --stop           stop the panels and the sampler thread

        The host's CPU and memory use are shown beneath the GPUs. The panel is plain HTML redrawn in place, so
        a saved notebook shows its last view; ``--stop`` freezes it. In a terminal IPython, which cannot redraw
        outputs, it prints one snapshot instead. GPUs that cannot be read (no driver, no permission, a lost
        GPU) are listed with the reason; the others keep updating.
        """
        args = self._parser.parse_line(line)
        if args.stop:
            if args.interval is not None:
                raise UsageError("%gpumonitor: --stop takes no --interval.")
            self.close()
            return
        sampler = get_sampler()
        if args.interval is not None:
            if args.interval < MIN_INTERVAL:
                raise UsageError(
                    f"%gpumonitor: --interval must be at least {MIN_INTERVAL} s (got {args.interval:g}); "
                    "NVML cannot be sampled usefully faster."
                )
            sampler.interval = args.interval
        from gpu_magics.display.live import LivePanel, can_show_widgets

        simulated = " (simulated: $GPU_MAGICS_SOURCE)" if source_from_env().simulated else ""
        if not can_show_widgets(self.shell):
            if simulated:
                print(f"GPUs{simulated}")
            print(live_panel_text(sampler.tick()))
            return
        sampler.start()
        sampler.tick()
        panel = LivePanel(sampler, title=f"GPUs{simulated} · every {format_seconds(sampler.interval)}")
        panel.show(in_slot=False)
        panel.start()
        self._panels.append(panel)

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
