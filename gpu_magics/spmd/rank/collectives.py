"""What this rank's ``torch.distributed`` group is doing, read from the side (the REPL's control thread, while the
main thread may wait in a collective), and its abort.

- ``state``: the group's backend, how many collectives this rank has entered (the group's sequence number), the
  one it waits in where it waits (PyTorch's flight recorder, on by default in the torch releases that have it;
  else the collective the stack is in), and
  whether the group was aborted here. The kernel compares the ranks' numbers to say which ranks never entered a
  collective that another waits in.
- ``abort``: a stuck NCCL collective ends when its communicator is aborted, so a rank waiting for it answers an
  interrupt; gloo has no abort that frees its own waits, but a rank that is not in a collective destroying its
  group closes its connections, which ends the waits of the ranks that are. The group is made again at the next
  cell, in the same processes (``groups.init_torch(remake=True)``).
"""

from __future__ import annotations

import gc
import pickle
import sys
import traceback
from types import FrameType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gpu_magics.spmd.messages import Collective, Pending

aborted = False  # the group was aborted here: the next cell makes it again


def _distributed() -> Any:
    dist = sys.modules.get("torch.distributed")
    if dist is None:
        return None
    return dist if dist.is_available() and dist.is_initialized() else None


def sequence() -> int | None:
    """How many collectives this rank has entered in its torch group (``None`` where it has none)."""
    dist = _distributed()
    if dist is None:
        return None
    try:
        return int(dist.group.WORLD._get_sequence_number_for_group())
    except (AttributeError, RuntimeError, ValueError):  # torch's private API moved, or no group
        return None


def state(frame: FrameType | None, gpu_wait: bool = False) -> Collective | None:
    """The group's state (``None`` where this rank has none), ``frame`` being the main thread's innermost;
    ``gpu_wait``: the cell's code ended and its GPU work has not (without the flight recorder, the last collective
    this rank entered is then a guess at what it waits for, which the kernel names only where a rank is behind)."""
    dist = _distributed()
    if dist is None:
        return {"aborted": True} if aborted else None
    try:
        group = dist.group.WORLD
        seq = int(group._get_sequence_number_for_group())
        found: Collective = {"backend": str(dist.get_backend(group)), "seq": seq}
    except (AttributeError, RuntimeError, ValueError):  # torch's private API moved, or no group: nothing to compare
        return {"aborted": aborted} if aborted else None
    found["aborted"] = aborted
    pending = recorded_wait() or stack_wait(frame, seq)
    if pending is None and gpu_wait and seq > 0:
        pending = {"name": "collective", "seq": seq, "guess": True}
    if pending is not None:
        found["pending"] = pending
    return found


def recorded_wait() -> Pending | None:
    """The first collective the flight recorder has that has not completed: its name and number."""
    import torch

    c10d = torch._C._distributed_c10d
    dump = getattr(c10d, "_dump_fr_trace", None) or getattr(c10d, "_dump_nccl_trace", None)
    if dump is None:
        return None
    try:
        entries = pickle.loads(dump(True, False, False)).get("entries", [])  # all: a waiting one may not be "active"
    except (RuntimeError, pickle.UnpicklingError, AttributeError, TypeError):  # no recorder on: the stack says
        return None
    waiting = [
        entry
        for entry in entries
        if not entry.get("retired") and entry.get("state") != "completed" and not entry.get("is_p2p")
    ]
    if not waiting:
        return None
    first = min(waiting, key=lambda entry: int(entry.get("collective_seq_id", 0)))
    name = str(first.get("profiling_name", "collective")).rpartition(":")[2]
    return {"name": name, "seq": int(first.get("collective_seq_id", 0))}


def stack_wait(frame: FrameType | None, seq: int) -> Pending | None:
    """The collective the main thread's stack is in (``all_reduce``, ``barrier``), numbered as the group's last."""
    if frame is None:
        return None
    for entry in reversed(traceback.extract_stack(frame)):
        if entry.filename.endswith("distributed_c10d.py") and not entry.name.startswith("_"):
            return {"name": entry.name, "seq": seq}
    return None


def abort(running: bool) -> bool:
    """Abort the group so that no rank stays in one of its collectives; whether there was one to abort.
    ``running``: the main thread is in a cell (a gloo group is then left to the ranks that are not)."""
    global aborted
    dist = _distributed()
    if dist is None:
        return False
    backend = str(dist.get_backend())
    try:
        if backend == "gloo" and not running:
            dist.destroy_process_group()
            gc.collect()  # the group's last references go: its connections close, the peers' waits end
        elif backend != "gloo":
            dist.distributed_c10d._abort_process_group()
    except (RuntimeError, ValueError):  # an abort that fails leaves the group to be made again all the same
        pass
    aborted = True
    return True


def end_for_remake() -> None:
    """End the group (aborted or not) so that it can be made again in this process."""
    global aborted
    dist = _distributed()
    if dist is not None:
        try:
            if str(dist.get_backend()) != "gloo" and not aborted:
                dist.distributed_c10d._abort_process_group()  # a collective still on the GPU ends with it
            if dist.is_initialized():  # an abort may have let the group go already
                dist.destroy_process_group()
        except (RuntimeError, ValueError, AssertionError):  # a group torn down half-way: made again all the same
            pass
        gc.collect()
    aborted = False
