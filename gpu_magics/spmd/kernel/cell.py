"""One SPMD cell: the world for it, the process groups it needs, then its code, handed to every chosen rank at
once (``cell_run`` watches each run), shown while the ranks run and ended cleanly whatever happens.

- A rank that raises stops every other rank (an interrupt; a rank that does not stop within a few seconds, such
  as one waiting in a collective that will never complete, has its process ended), and the cell fails with the
  first failing rank's traceback (its own frames, library frames folded) and one line for each other rank; a
  package the ranks lack is one line with its pip command.
- A rank process that ended (by itself, or ended here) makes the next cell start every rank anew and make the
  groups the last world had; a rank found dead as the cell reaches it does the same at once (the cell runs once).
- One status table per cell (the group made for it is a line in it); lines show in the order the ranks printed
  them, progress bars as one live line per rank.
- Ctrl-C stops every rank the same way; the cell reports ``KeyboardInterrupt``.
- A rank that prints nothing for ``stall_s`` seconds is named in its status row, with where it waits.
- Rank 0's last expression (the first chosen rank's, under ``--ranks``) is the cell's result.
"""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING, Any

from gpu_magics.spmd.kernel.cell_run import CellRun, CellSettings, WorldLost
from gpu_magics.spmd.kernel.ranks import Ranks, for_client
from gpu_magics.spmd.kernel.view.results import group_note
from gpu_magics.spmd.kernel.view.shown import Board
from gpu_magics.spmd.kernel.world import PROG, check_group, check_source
from gpu_magics.spmd.messages import InitCommand, RunCommand
from gpu_magics.text.errors import RankError

if TYPE_CHECKING:
    from IPython.core.interactiveshell import InteractiveShell

    from gpu_magics.gpurun.options import RunOptions


def run(shell: InteractiveShell, options: RunOptions, code: str, settings: CellSettings) -> Any:
    """Run ``code`` as an SPMD cell; its result (rank 0's value), with ``-o`` the ``SpmdResult`` kept."""
    from gpu_magics.cluster.control import queries

    check_source(code)
    client = queries.require_client()
    queries.direct_work_ahead()  # a parked cluster resumes first: the ranks reach the workers without the scheduler
    made = for_client(client)
    if options.reset:
        made.end()
        if not code.strip():
            print(f"{PROG}: the ranks were ended; the next SPMD cell starts new ones")
            return None
    if not code.strip() and not options.init and not made.regroup:
        return None
    board = Board(settings.quiet, options.show_ranks)
    made.busy = True  # a park waits for no SPMD cell: the idle one lets it be
    try:
        try:
            return _run_world(shell, made, options, code, settings, board)
        except WorldLost as lost:  # a rank had ended before the cell reached it: a new world, once
            made.lose(lost.rank, lost.how)
            board.notes.clear()
        return _retry(shell, made, options, code, settings, board)
    finally:
        made.busy = False


def _retry(
    shell: InteractiveShell, made: Ranks, options: RunOptions, code: str, settings: CellSettings, board: Board
) -> Any:
    """The cell once more on a new world, after a rank found ended as the cell reached it."""
    try:
        return _run_world(shell, made, options, code, settings, board)
    except WorldLost as lost:
        made.lose(lost.rank, lost.how)
        raise RankError(
            f"{PROG}: rank {lost.rank}'s new process ended too before the cell reached it ({lost.how}); nothing ran "
            "(see the workers' logs; %gpucluster restart gives new workers)"
        ) from None


def _run_world(
    shell: InteractiveShell,
    made: Ranks,
    options: RunOptions,
    code: str,
    settings: CellSettings,
    board: Board,
) -> Any:
    """The cell on the world of now: the groups it needs first (those the last world had, ``--init``), then the
    code."""
    world, notes = made.prepare_for_cell()
    for note in notes:
        print(note)
    chosen = world.select(options.ranks, f"{PROG} --ranks")
    if options.show_ranks is not None:
        world.select(options.show_ranks, f"{PROG} --output")
    timeout_s = settings.timeout_s if options.timeout_s is None else options.timeout_s
    kinds = list(made.regroup) + list(made.remake)
    if made.remake:
        again = " ".join(f"--init {kind}" for kind in made.remake)
        print(
            f"{PROG}: the process group is made again in the same processes, now ({again}): variables are kept; "
            "make again what holds the old group, such as a DDP model"
        )
    if options.init and options.init not in made.groups and options.init not in kinds:
        kinds.append(options.init)
    for kind in kinds:
        check_group(world, kind, world.ranks)
        made.cells += 1
        init = CellRun(shell, made, world, world.ranks, settings, board, leads=bool(code.strip()))
        message: InitCommand = {"op": "init", "kind": kind, "timeout": timeout_s, "cell": f"<rank init {made.cells}>"}
        if kind in made.remake:  # the same processes, a new port: the old group's may still be bound
            message["remake"], message["env"] = True, made.remake_port()
        result = init.run(message)
        if result is None:
            return None
        made.group_made(kind)
        board.notes.append(group_note(str(result.outcomes[0].value), result.wall))
    if not code.strip():
        if kinds and not settings.quiet:
            board.show(init.view(finished=True))
        return None
    made.cells += 1
    name = cell_name(shell, made)
    command: RunCommand = {"op": "run", "code": code, "name": name, "cell": name, "gpu_wait_s": timeout_s}
    result = CellRun(shell, made, world, chosen, settings, board).run(command)
    if result is None:
        return None
    if options.output:
        shell.user_ns[options.output] = result
    return result.outcomes[0].value


_numbers_used: weakref.WeakKeyDictionary[Ranks, dict[int, int]] = weakref.WeakKeyDictionary()


def cell_name(shell: InteractiveShell, made: Ranks) -> str:
    """The cell's name in the ranks' tracebacks, as the notebook numbers it: ``<rank cell 5>`` for the cell shown
    as ``[5]`` (the number its ``Out[5]`` gets: IPython counts the cell before it runs it). A number these ranks had
    already (a cell run without history keeps the count) gets the run's number too, ``<rank cell 5, run 2>``: each
    cell's lines stay its own in later tracebacks."""
    number = int(getattr(shell.displayhook, "prompt_count", 0) or made.cells)
    used = _numbers_used.setdefault(made, {})
    runs = used[number] = used.get(number, 0) + 1
    return f"<rank cell {number}>" if runs == 1 else f"<rank cell {number}, run {runs}>"
