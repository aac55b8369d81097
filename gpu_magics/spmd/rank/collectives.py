"""What this rank's ``torch.distributed`` group is doing, read from the side (the REPL's control thread, while the
main thread may wait in a collective), and its abort.

- ``state``: the group's backend, how many collectives this rank has entered (the group's sequence number), the
  one it waits in where it waits (PyTorch's flight recorder, on by default in the torch releases that have it:
  NCCL's own for an NCCL group, the CPU one for gloo; else the collective the stack is in, else only its number
  and why the recorder could not name it), and
  whether the group was aborted here. The kernel compares the ranks' numbers to say which ranks never entered a
  collective that another waits in.
- ``abort``: a stuck NCCL collective ends when its communicator is aborted, so a rank waiting for it answers an
  interrupt; gloo has no abort that frees its own waits, but a rank that is not in a collective destroying its
  group closes its connections, which ends the waits of the ranks that are. The group is made again at the next
  cell, in the same processes (``groups.init_torch(remake=True)``).
"""

from __future__ import annotations

import gc
import os
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
    recorded, unnamed = recorded_wait(found["backend"])
    pending = recorded or stack_wait(frame, seq)
    if pending is None and gpu_wait and seq > 0:
        pending = {"name": "collective", "seq": seq, "guess": True, "unnamed": unnamed}
    if pending is not None:
        found["pending"] = pending
    return found


# torch's flight recorders, by the backends whose collectives they record: NCCL's own, and (torch 2.8 on) the one
# of gloo and the other CPU backends. A release before 2.8 has NCCL's only.
RECORDERS = {"nccl": ("_dump_nccl_trace", "_dump_fr_trace")}
CPU_RECORDERS = ("_dump_fr_trace", "_dump_nccl_trace")
BUFFER_SIZES = ("TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE")  # 0 turns a recorder off


def recorded_wait(backend: str) -> tuple[Pending | None, str]:
    """The first collective of this rank's default group that the flight recorder of ``backend``'s collectives
    holds and that has not completed (its name and number), with ``""``; else ``None`` and why the recorder cannot
    tell (the row says it where the collective's number is all the kernel has)."""
    import torch

    c10d = torch._C._distributed_c10d
    dumps = [getattr(c10d, name) for name in RECORDERS.get(backend, CPU_RECORDERS) if hasattr(c10d, name)]
    if not dumps:
        return None, "this torch has no flight recorder"
    read = False
    for dump in dumps:
        try:  # all entries: a waiting one may not be "active"
            entries = pickle.loads(dump(True, False, False)).get("entries", [])
        except (RuntimeError, pickle.UnpicklingError, AttributeError, TypeError):  # this recorder is not on
            continue
        read = True
        found = first_unfinished(entries)
        if found is not None:
            return found, ""
    off = [f"{name}=0" for name in BUFFER_SIZES if os.environ.get(name, "").strip() == "0"]
    if off:
        return None, f"torch's flight recorder is off ({', '.join(off)})"
    if not read:
        return None, "torch's flight recorder could not be read"
    return None, "torch's flight recorder holds no unfinished collective of this group"


def first_unfinished(entries: list[dict[str, Any]]) -> Pending | None:
    """Among a flight recorder's entries, the first collective of the default group (the one made last, where the
    group was made again) that has not completed: its name (``all_reduce``) and number."""
    waiting = [
        entry
        for entry in entries
        if not entry.get("retired")
        and entry.get("state") != "completed"
        and not entry.get("is_p2p")
        and _group_desc(entry) in ("default_pg", None)
    ]
    if not waiting:
        return None
    newest = max(int(entry.get("pg_id", 0)) for entry in waiting)  # a group made again has a new id
    first = min(
        (entry for entry in waiting if int(entry.get("pg_id", 0)) == newest),
        key=lambda entry: int(entry.get("collective_seq_id", 0)),
    )
    name = str(first.get("profiling_name", "collective")).rpartition(":")[2]
    return {"name": name, "seq": int(first.get("collective_seq_id", 0))}


def _group_desc(entry: dict[str, Any]) -> str | None:
    """The description of the group an entry belongs to (``default_pg`` for the default group), where it says."""
    group = entry.get("process_group")
    return str(group[1]) if isinstance(group, (tuple, list)) and len(group) > 1 else None


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


def end_for_remake(*, idle: bool = False) -> None:
    """End the group (aborted or not) so that it can be made again in this process. ``idle``: no collective can be
    under way (a park, between cells), so an NCCL group is destroyed without an abort first (0.49 s against 0.98 s on
    an H200)."""
    global aborted
    dist = _distributed()
    if dist is not None:
        try:
            if str(dist.get_backend()) != "gloo" and not aborted and not idle:
                dist.distributed_c10d._abort_process_group()  # a collective still on the GPU ends with it
            if dist.is_initialized():  # an abort may have let the group go already
                dist.destroy_process_group()
        except (RuntimeError, ValueError, AssertionError):  # a group torn down half-way: made again all the same
            pass
        gc.collect()
    aborted = False
