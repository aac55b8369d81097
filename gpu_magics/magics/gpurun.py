"""``%%gpurun``: run a cell on cpu-single, cpu-threads, gpu or multi-gpu, timed, and compare backends."""

from __future__ import annotations

import dataclasses
import sys
from typing import TYPE_CHECKING, Any

from IPython.core.interactiveshell import InteractiveShell
from IPython.core.magic import Magics, line_cell_magic, magics_class
from traitlets import Bool, CaselessStrEnum, Float, Int

from gpu_magics.cluster.background import ahead
from gpu_magics.display.live import can_show_widgets
from gpu_magics.gpurun import backends, device_pools, execute
from gpu_magics.gpurun.live import progress
from gpu_magics.gpurun.options import CHOICES, COMPARE_ALL, RunOptions, parse_run_line, parse_session_line
from gpu_magics.gpurun.results import RunResult
from gpu_magics.gpurun.session import placement, plain_cells, spmd_cells
from gpu_magics.magics.free_gpus import FreeGpuSettings, choose_free
from gpu_magics.text.errors import GpuMagicsError, LineError, said_in_one_line
from gpu_magics.text.units import format_seconds

if TYPE_CHECKING:
    from gpu_magics.display.live import PanelSlot


@magics_class
class GpuMagics(Magics, FreeGpuSettings):
    """Run cells on CPU and GPU backends. Configure with ``%config GpuMagics.<trait> = value``."""

    default_backend = CaselessStrEnum(
        list(CHOICES),
        default_value="auto",
        help="Backend for %%gpurun when the line names none.",
    ).tag(config=True)
    gpu_threads = Int(
        backends.GPU_BACKEND_THREADS,
        min=1,
        help="Dask threads feeding the one device of the gpu backend (--workers overrides).",
    ).tag(config=True)
    cpu_threads = Int(
        0,
        min=0,
        help="Threads of the cpu-threads backend; 0 means every core (--workers overrides).",
    ).tag(config=True)
    monitor = Bool(True, help="Show the live GPU panel while %%gpurun cells run.").tag(config=True)
    session_summary = Bool(
        False,
        help=(
            "With a session backend (%gpurun BACKEND), show the one-line summary, with the time split, after each "
            "plain cell that ran dask tasks."
        ),
    ).tag(config=True)
    free_pool_after_cell = Bool(
        False,
        help=(
            "After each %%gpurun cell on a GPU, give back what this kernel's CuPy memory pool caches (the next cell "
            "allocates again, a little slower): other notebooks and %gpucluster's workers can use that memory."
        ),
    ).tag(config=True)
    restart_on_interrupt = Bool(
        False,
        help=(
            "When a %%gpurun multi-gpu cell is interrupted, restart the workers of the cluster started here, "
            "which stops the tasks still running on them (their memory is freed; persisted data is lost)."
        ),
    ).tag(config=True)

    spmd_stall_s = Float(
        30.0,
        min=1.0,
        help="Seconds without output after which an SPMD rank's status row says where it waits.",
    ).tag(config=True)
    spmd_timeout_min = Float(
        5.0,
        min=0.05,
        max=24 * 60.0,
        help="Minutes a collective of a group made with %%gpurun spmd --init waits, at most 1440 (--timeout wins).",
    ).tag(config=True)

    @property
    def _shell(self) -> InteractiveShell:
        assert self.shell is not None, "GpuMagics needs a shell"
        return self.shell

    @line_cell_magic
    @said_in_one_line
    def gpurun(self, line: str, cell: str | None = None) -> Any:
        """Run the cell on a backend, time it, and show a one-line summary.

        Usage::

            %%gpurun [BACKEND] [--device N|free] [--workers N] [--repeat N] [-o NAME] [-q] [--no-monitor]
            %%gpurun --compare cpu-threads,gpu[,...] [--rtol R] [--repeat N] [-o NAME] [-q]
            %%gpurun --compare all     (every backend this machine can run)

        BACKEND is one of:

        - ``cpu-single``   dask's synchronous scheduler, NumPy chunks, one CPU thread.
        - ``cpu-threads``  dask's threaded scheduler on every core (``--workers N`` threads), NumPy chunks.
        - ``gpu``          one GPU (``--device N``, default 0; ``--device free``: the freest GPU, said in one
                           line): ``array.backend="cupy"`` and threads bound to it.
        - ``multi-gpu``    the cluster from ``%gpucluster``, CuPy chunks on every GPU worker.
        - ``auto``         (the default) multi-gpu when a GPU cluster is attached, else gpu when a GPU is
                           visible, else cpu-threads. ``%config GpuMagics.default_backend = "gpu"`` changes it.
        - ``spmd``         the cell runs once on every worker of the cluster at the same time: one rank process
                           per worker (per GPU), for PyTorch and JAX code written for torchrun (below).

        SPMD cells (one process per GPU)::

            %%gpurun spmd [--ranks 0|0,2|1-3] [--init torch|jax] [--timeout 5m] [--reset] [--output RANKS]
                          [-o NAME] [-q]

        Each rank keeps its variables across SPMD cells. Ranks get torchrun's environment (``RANK``,
        ``LOCAL_RANK``, ``WORLD_SIZE``, ``LOCAL_WORLD_SIZE``, ``MASTER_ADDR``/``MASTER_PORT`` (a free port on rank
        0's host), ``TORCHELASTIC_RUN_ID`` and the rest), ``NODE_RANK`` and ``JAX_COORDINATOR_ADDRESS``; ranks are
        ordered by host, then GPU, and ``torch.cuda.set_device(LOCAL_RANK)`` puts each rank on its own worker's GPU.
        ``--init torch`` makes the ``torch.distributed`` group (NCCL on GPU ranks, gloo on CPU ranks), ``--init jax``
        calls ``jax.distributed.initialize``; the group is kept until ``--reset``, ``%gpucluster stop`` or a change
        of workers. ``--timeout`` is the collectives' timeout: seconds (``90``) or with a unit (``90s``, ``5m``,
        ``2h``), at most 24h (default 5m; under 60 it needs its unit). ``--ranks`` runs a cell on some ranks
        only, each named once. Output shows live, in the order the ranks printed it, alike lines once (``[0-3]
        loss 0.52``), a progress bar as one live line per rank;
        ``--output 0`` shows only rank 0's lines live and folds the others' into a block a click opens. A rank
        that raises or Ctrl-C stops every rank within seconds. When a rank process has ended (a crash, a kill),
        the next cell starts every rank anew, says so in one line, and makes the group again as before. Rank 0's
        last expression is the cell's result; ``-o NAME`` keeps every rank's value, error, time and peak GPU
        memory.
        ``gpu_magics.spmd.push(name=value)`` sets a variable on every rank; ``gpu_magics.spmd.pull("name")``
        brings one back (``rank=0``: from one rank). The rank environment is put back before every cell, so
        Accelerate's ``Accelerator()``, Lightning's ``Fabric``/``Trainer`` and DDP code run unchanged.
        A persisted dask array pushed (``push(x=x)``) gives each rank ``spmd.shards(x)``: the chunks its worker holds.

        Options:

        - ``--repeat N``   run N times (at most 1000); report the best and median wall time.
        - ``--compare a,b`` run once per backend, two or more (the first is the reference): a table of wall
                           times, speed-ups and whether the last expression's value agrees (within ``--rtol``,
                           default 1e-3).
                           Each backend first runs the cell once untimed (a warm-up: imports, CUDA start), unless
                           that run took over 10 s; then it is the timed one, marked cold.
        - ``-o NAME``      store the result object (times, tasks, monitor figures) in the variable NAME.
        - ``-q``           no summary line (also ``--quiet``).
        - ``--no-monitor`` no live GPU panel while the cell runs.

        Short forms: ``-d`` for ``--device``, ``-w`` for ``--workers``, ``-r`` for ``--repeat``, ``-c`` for
        ``--compare``.

        Wall time includes waiting for the GPU work to finish. The cell's last expression is its result,
        as in a plain cell. Dask arrays made before the cell keep their chunk type: a NumPy-backed array in a
        ``gpu`` cell still runs on the CPU, and the summary says so.

        Every cell (a session backend), as a line with no cell::

            %gpurun BACKEND [--device N|free] [--workers N]   every following plain cell runs as under
                                                              %%gpurun BACKEND -q (no panel, no summary)
            %gpurun spmd [--init torch] [--ranks ...]          every following plain cell is an SPMD cell
                                                              (cells that begin with % or ! run here)
            %gpurun spmd --reset                              end the ranks (the next SPMD cell starts new ones)
            %gpurun off                                       back to dask's own settings, exactly as before
            %gpurun                                           which backend plain cells use now

        A ``%%gpurun`` cell still runs on the backend it names. ``%config GpuMagics.session_summary = True``
        shows the one-line summary (with the time split) after each plain cell that ran dask tasks;
        ``%config ClusterMagics.plain_cells_on_cluster = True`` runs plain cells on the cluster after every
        ``%gpucluster``.
        """
        ahead.wait_for_imports()  # it needs them (said once if the wait passes a second)
        if cell is None:
            return self._session_line(line)
        with plain_cells.for_shell(self._shell, self).suspended():
            return self._run_cell(line, cell)

    def _run_cell(self, line: str, cell: str) -> Any:
        options = parse_run_line(line)
        if options.spmd:
            return self._run_spmd(options, cell, line)
        options = self._choose_free_device(options)
        plans, skipped = self._plans(options)
        compiled = execute.compile_cell(self._shell, cell)
        if compiled is None:
            return None
        from gpu_magics.display.live import shared_slot

        with shared_slot() as slot:  # the live panels, then the summary, take one output
            ran: list[tuple[backends.BackendPlan, execute.Outcome]] = []
            try:
                if not options.compare:
                    return self._run_single(options, plans[0], compiled, slot, ran)
                return self._run_compare(options, plans, compiled, skipped, slot, ran)
            finally:
                error = ran[-1][1].error if ran else None
                self._after_cell([plan for plan, _ in ran] or plans, error)
                if error is not None:  # the cell fails (its traceback was shown once)
                    execute.mark_failed(self._shell, error)

    def _run_spmd(self, options: RunOptions, source: str, line: str) -> Any:
        from gpu_magics.spmd.kernel import cell

        settings = cell.CellSettings(
            quiet=options.quiet, stall_s=self.spmd_stall_s, timeout_s=self.spmd_timeout_min * 60
        )
        try:
            value = cell.run(self._shell, options, source, settings)
        except GpuMagicsError as error:
            made = plain_cells.current(self._shell)
            if made is not None and made.spmd is not None and made.spmd.made(line):  # a plain cell made an SPMD cell
                raise type(error)(f"{error}; {spmd_cells.OFF_HINT}") from None
            raise
        return None if self._shell.displayhook.semicolon_at_end_of_expression(source) else value

    def _spmd_line(self, line: str) -> None:
        """``%gpurun spmd [options]``: plain cells become SPMD cells; ``--reset`` ends the ranks."""
        try:
            options = parse_run_line(line)
            if options.output or options.compare:
                raise LineError("%gpurun spmd: -o and --compare are for one %%gpurun cell")
        except GpuMagicsError as error:
            raise type(error)(_as_line_magic(str(error))) from None
        from gpu_magics.spmd.kernel import ranks

        if options.reset:
            found = ranks.current()
            if found is not None:
                found.end()
            print("%gpurun spmd: the ranks were ended; the next SPMD cell starts new ones")
            return
        where = ranks.where_cells_run(options.ranks, options.show_ranks)  # one line for ranks outside the world
        plain_cells.for_shell(self._shell, self).use_spmd(line.strip()[len("spmd") :])
        print(
            f"%gpurun: plain cells now run as SPMD cells on {where} (cells that begin with % or ! run here); "
            "%gpurun off ends it"
        )

    def _session_line(self, line: str) -> None:
        """``%gpurun BACKEND`` / ``off`` / nothing: choose, end or tell the backend of plain cells."""
        made = plain_cells.for_shell(self._shell, self)
        words = line.strip()
        if not words:
            if made.spmd is not None:
                print(f"%gpurun: plain cells run as SPMD cells (%gpurun {made.spmd.line.replace(' -q', '')})")
                return
            print(placement.plain_cells(made.plan).line())
            return
        if words.split()[0].lower() == "spmd":
            self._spmd_line(line)
            return
        if words.lower() == "off":
            ended = made.end()
            if isinstance(ended, spmd_cells.SpmdCells):
                print("%gpurun: plain cells run in this kernel again (not spmd)")
                return
            print(placement.off_line(None if ended is None else ended.name))
            return
        try:
            options = parse_session_line(line)
            options = self._choose_free_device(options)
            plans, _ = self._plans(options, prog="%gpurun")
        except GpuMagicsError as error:
            raise type(error)(_as_line_magic(str(error))) from None
        print(self._use_session(plans[0]))

    def use_session(self, backend: str) -> str:
        """Run plain cells on ``backend`` from now on (``%config ClusterMagics.plain_cells_on_cluster``); the
        line that says so, or the package's one-line error."""
        return self._use_session(self._plans(RunOptions(backend=backend), prog="%gpurun")[0][0])

    def _use_session(self, plan: backends.BackendPlan) -> str:
        plain_cells.for_shell(self._shell, self).use(plan)
        return placement.session_line(plan)

    def plain_cells(self) -> placement.Placement:
        """Where plain cells run now (the session backend, or dask's own settings)."""
        made = plain_cells.current(self._shell)
        return placement.plain_cells(None if made is None else made.plan)

    def _choose_free_device(self, options: RunOptions) -> RunOptions:
        """``--device free``: the freest GPU, said in one line (where a backend the line runs takes --device)."""
        if not options.device_free:
            return options
        names = [name or self.default_backend for name in options.backends]
        if not any(name in ("gpu", "auto") for name in names):  # the backends' own one-line refusal
            backends.plan(names[0], device=0, default=self.default_backend)
        (index,), line = choose_free("%%gpurun --device free", 1, self.free_rule, config="GpuMagics")
        print(line)
        return dataclasses.replace(options, device=index, device_free=False)

    def after_session_cell(self, plan: backends.BackendPlan, error: BaseException | None) -> None:
        """After a plain cell on the session backend: the same step as after a ``%%gpurun`` cell."""
        self._after_cell([plan], error)

    def _after_cell(self, plans: list[backends.BackendPlan], error: BaseException | None) -> None:
        """After a cell on backends, either kind: an interrupted cluster run says what still runs there (and
        restarts the workers with ``restart_on_interrupt``); with ``free_pool_after_cell``, what the kernel's pool
        caches is given back once a cell ran on a GPU here."""
        if isinstance(error, KeyboardInterrupt) and plans and plans[-1].client is not None:
            from gpu_magics.cluster.control.verbs import interrupts

            print(interrupts.after_interrupt(plans[-1].client, restart=self.restart_on_interrupt))
        if self.free_pool_after_cell and any(plan.gpu_indices for plan in plans):
            from gpu_magics.cluster.records import kernel_report

            kernel_report.free()

    def _plans(
        self, options: RunOptions, prog: str = "%%gpurun"
    ) -> tuple[list[backends.BackendPlan], tuple[tuple[str, str], ...]]:
        """The plans to run, and the backends ``--compare all`` skips here, each with why; a cell that needs the
        cluster waits for its start under way and says so once (``prog``: the magic that waits): in its live line,
        or where there is none, in a note of the summary."""
        names = {name or self.default_backend for name in options.backends}
        waited = 0.0
        live = can_show_widgets(self._shell)
        if options.compare or "multi-gpu" in names:
            waited = progress.wait_for_cluster(live, prog)
        from gpu_magics.cluster.reading.inspection import one_reading

        with one_reading():  # the workers' count, GPUs and hardware line from one reading of the scheduler
            plans, skipped = self._plan(options)
        if waited >= 0.05 and not live:
            note = f"waited {format_seconds(waited)} for the cluster to start, not counted in the cell's time"
            plans = [dataclasses.replace(plan, notes=(note, *plan.notes)) for plan in plans]
        return plans, skipped

    def _plan(self, options: RunOptions) -> tuple[list[backends.BackendPlan], tuple[tuple[str, str], ...]]:
        preferences = backends.Preferences(gpu_threads=self.gpu_threads, cpu_threads=self.cpu_threads or None)
        if options.compare != (COMPARE_ALL,):
            plans = backends.plans_for(
                [name or None for name in options.backends],
                device=options.device,
                workers=options.workers,
                default=self.default_backend,
                preferences=preferences,
            )
            return plans, ()
        plans, skipped = backends.available_plans(
            device=options.device, workers=options.workers, preferences=preferences
        )
        return plans, tuple((item.backend, item.reason) for item in skipped)

    def _run_single(
        self,
        options: RunOptions,
        plan: backends.BackendPlan,
        compiled: execute.CompiledCell,
        slot: PanelSlot,
        ran: list[tuple[backends.BackendPlan, execute.Outcome]],
    ) -> Any:
        result, outcome = self._run_plan(options, plan, compiled)
        ran.append((plan, outcome))
        self._report(options, result, slot)
        return None if outcome.failed or compiled.silent else outcome.value

    def _run_compare(
        self,
        options: RunOptions,
        plans: list[backends.BackendPlan],
        compiled: execute.CompiledCell,
        skipped: tuple[tuple[str, str], ...],
        slot: PanelSlot,
        ran: list[tuple[backends.BackendPlan, execute.Outcome]],
    ) -> Any:
        results: list[tuple[RunResult, execute.Outcome]] = []
        for plan in plans:
            results.append(self._run_plan(options, plan, compiled))
            ran.append((plan, results[-1][1]))
            if results[-1][1].failed:
                break
        comparison = dataclasses.replace(execute.compare_rows(results, options.rtol), skipped=skipped)
        self._report(options, comparison, slot)
        first = results[0][1]
        return None if first.failed or compiled.silent else first.value

    def _run_plan(
        self, options: RunOptions, plan: backends.BackendPlan, compiled: execute.CompiledCell
    ) -> tuple[RunResult, execute.Outcome]:
        return execute.run_on_backend(
            self._shell,
            compiled,
            plan,
            repeat=options.repeat,
            observer=self._observer(options, plan),
            notes=execute.chunk_mismatches(self._shell, compiled.names, plan),
            warm_up=execute.WARM_UP_LIMIT if options.compare else None,
        )

    def _observer(self, options: RunOptions, plan: backends.BackendPlan) -> execute.CellObserver | None:
        if not (options.monitor and self.monitor):
            return None
        from gpu_magics.gpurun.live.cell_monitor import CellMonitor

        quiet = options.quiet and not options.output  # nobody looks at its figures: sampled once it runs a while
        return CellMonitor(self._shell, show_live=not options.quiet, keep_static=not options.compare, lazy=quiet)

    def _report(self, options: RunOptions, result: Any, slot: PanelSlot) -> None:
        """Keep the result (``-o``) and show it where the live panel was (or as a new output)."""
        if options.output:
            self._shell.user_ns[options.output] = result
        if not options.quiet:
            slot.show(result)

    def close(self) -> None:
        """Release what the magics hold (called on ``%unload_ext``)."""
        made = plain_cells.current(self._shell)
        if made is not None and made.spmd is not None:
            made.end()
        # ranks exist only where an SPMD cell imported this; importing it here would import distributed while
        # the imports %load_ext began may still run in their thread (a half-made module for one of them)
        ranks = sys.modules.get("gpu_magics.spmd.kernel.ranks")
        if ranks is not None:
            ranks.end_all()
        device_pools.shutdown_pools()


def _as_line_magic(message: str) -> str:
    """A ``%%gpurun`` error said of the line magic."""
    if message.startswith("%%gpurun"):
        return message[1:]
    return message if message.startswith("%gpurun") else f"%gpurun: {message}"
