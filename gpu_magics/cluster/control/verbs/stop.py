"""``%gpucluster stop``: the machine says what to stop (a start under way, the cluster in use, a parked one resumed
first, nothing); the cluster taken out of use is let go here and closes in a thread (``Closing``)."""

from __future__ import annotations

from gpu_magics.cluster.background.closing import Closing
from gpu_magics.cluster.control import kernel_cluster, owner, steps
from gpu_magics.cluster.control.machine import events
from gpu_magics.cluster.control.machine.phase import Phase
from gpu_magics.cluster.control.queries import settle_start
from gpu_magics.cluster.control.verbs import resume
from gpu_magics.cluster.options import PROG
from gpu_magics.cluster.reading.running import ActiveCluster
from gpu_magics.text.units import one_line

STOP_WAIT_S = 1.5  # how long stop waits for a start under way to close what it made; then it goes on closing alone
NO_CLUSTER = f"{PROG}: no cluster is running"  # what stop says when it found nothing to stop


def stop(close: bool = False, keep: bool = False, *, only: ActiveCluster | None = None) -> str:
    """Close the cluster started here (or only disconnect from one attached to; an adopted one is closed only
    with ``close``; a gateway cluster made here is left running with ``keep``); a start under way is stopped (what
    it made is closed). ``only``: stop only if that cluster is still in use. Says what it did, within about
    ``STOP_WAIT_S`` seconds whatever runs: what has not ended by then goes on ending in the background."""
    if keep and kernel_cluster.phase() is Phase.STARTING:
        settle_start()  # keep what the start makes: let it finish first (its failure is this verb's line)
    answer = owner.post(events.StopAsked(only, keep))
    if resume.resumed_first(answer, said_here=False):  # a parked cluster's workers end as usual once resumed
        answer = owner.post(events.StopAsked(only, keep, resumed=True))
    refused = next((item.cluster for item in answer if isinstance(item, events.KeepRefused)), None)
    if refused is not None:
        steps.refuse_keep(refused)
    cancel = next((item.start for item in answer if isinstance(item, events.CancelStart)), None)
    claim = next((item for item in answer if isinstance(item, events.CloseCluster)), None)
    if cancel is not None:
        pending = cancel
        ended = pending.cancel(timeout=STOP_WAIT_S)  # its job closes what it made, then the owner hears it ended
        slow = "" if ended else "; its processes end in the background"
        return f"{PROG}: stopped {pending.name!r} while it was {pending.verb}{slow}"
    if claim is None:
        return NO_CLUSTER
    current = claim.cluster
    during = ""
    if claim.during is not None:
        claim.during.cancel(timeout=0)  # a restart or scale under way: it ends as stopped; the cluster closes
        during = f" while it was {claim.during.verb}"
    held = steps.kept_on_workers(current.client)
    steps.release(current)
    manager = current.manager

    def wound_down(closing: Closing) -> None:
        owner.post(events.CloseEnded(closing))

    closing = Closing(  # in a thread: with a change under way, workers still starting end only slowly
        lambda: manager.finish(current.name, keep=True if keep else False if close else None),
        lambda error: f"{PROG}: closing {current.name!r} failed ({one_line(error)})",
        here=not during,
        then=wound_down,
    )
    owner.post(events.CloseBegan(closing))
    line = closing.line(STOP_WAIT_S)
    if line is None:
        line = f"{PROG}: stopped cluster {current.name!r}{during}; its processes end later"
    elif during:
        line += during
    if held:
        pieces = f"{held} piece{'s' if held > 1 else ''} of data kept on its workers (persisted chunks, futures)"
        line += f"; the {pieces} {'are' if held > 1 else 'is'} gone"
    return line


def wait_wound_down(timeout: float) -> bool:
    """Wait up to ``timeout`` seconds for what the last stop left to end its processes; whether it did."""
    winding = kernel_cluster.winding_down()
    return winding is None or winding.finished.wait(timeout)
