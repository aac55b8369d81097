"""Every message between the three SPMD rooms, as typed dicts (plain dicts on the wire, pickled as before):

- kernel -> host (the cell ``channel``, else ``Client.run``): a ``Command`` for the rank (``run``, ``init``,
  ``push``, ``pull``, and a park's ``park``, ``plan-park``, ``unpark``); the host answers with its ``Reply``, the
  cell's lines added. ``start`` answers with a ``RankStarted``, ``probe`` with a ``Probe``, ``where`` with a
  ``Where``.
- host -> rank, on the command pipe: the same ``Command`` with the host's ``id``; the rank says ``Ready`` once,
  ``Started`` as it takes a command, then its ``Reply``. On the control pipe: a ``Question`` (``where``,
  ``abort``), answered by a ``WhereAnswer`` or an ``AbortAnswer`` while a cell runs.
- host -> kernel, as events on the owner's topic (``Worker.log_event``): ``LinesEvent`` (a rank's lines and its
  live progress) and ``ExitedEvent`` (a rank process ended by itself).

Standard library only: the rank process reads it too.
"""

from __future__ import annotations

from typing import Any, Literal, NotRequired, TypedDict

Line = tuple[int, str, str, float]  # sequence number in the cell, stream, text, read at (time.time)
# stream: "out", "err", or "bar" (a progress bar's last state, its line ended: shown with the live bars)
Packed = tuple[bytes | None, str]  # a value pickled (None where it cannot travel) and its repr


# -- kernel -> host -> rank: commands ----------------------------------------------------------------------------
class RunCommand(TypedDict):
    """Run a cell's code in the rank's namespace."""

    op: Literal["run"]
    code: str
    name: str  # the cell's file name in tracebacks: ``<rank cell 3>``
    cell: str  # which cell the live lines belong to (the same name)
    gpu_wait_s: float  # how long the rank waits for the cell's GPU work after its code
    id: NotRequired[int]  # set by the host


class InitCommand(TypedDict):
    """Make the process group (``--init torch|jax``)."""

    op: Literal["init"]
    kind: str  # "torch" or "jax"
    timeout: float  # seconds a collective of the group waits
    cell: str  # ``<rank init 2>``
    remake: NotRequired[bool]  # made again in the same processes (variables kept)
    env: NotRequired[dict[str, str]]  # a new MASTER_PORT for a group made again
    id: NotRequired[int]


class PushCommand(TypedDict):
    """Set variables on the rank (``spmd.push``)."""

    op: Literal["push"]
    values: dict[str, bytes]  # name -> pickled value
    id: NotRequired[int]


class PullCommand(TypedDict):
    """Send variables back (``spmd.pull``)."""

    op: Literal["pull"]
    names: list[str]
    id: NotRequired[int]


class ParkCommand(TypedDict):
    """At a park (between cells): end the process group and move the GPU data to host memory (``park``), or say
    how much it would move (``plan-park``); at the resume, copy it back (``unpark``). Its figures in ``parked``."""

    op: Literal["park", "unpark", "plan-park"]
    id: NotRequired[int]


class HeldCommand(TypedDict):
    """What the rank's variables hold on GPUs, by name (``%gpumemory``): rows in ``held``, its pools in ``pools``."""

    op: Literal["held"]
    id: NotRequired[int]


Command = RunCommand | InitCommand | PushCommand | PullCommand | ParkCommand | HeldCommand


# -- rank -> host -> kernel: replies -----------------------------------------------------------------------------
class RankError(TypedDict):
    """A rank's failure as the kernel shows it."""

    type: str
    message: str
    traceback: str  # the user's frames in full, library frames folded
    full: NotRequired[str]  # every frame but the REPL's
    interrupted: NotRequired[bool]  # a KeyboardInterrupt: the rank was stopped


class Reply(TypedDict):
    """A command's answer. The rank fills the first part; the host adds the cell's lines, and where the rank
    process ended before answering, says so (``ended``) in the rank's place."""

    op: Literal["done"]
    ok: bool
    error: RankError | None
    id: NotRequired[int | None]
    value: NotRequired[bytes | None]  # the last expression, pickled (``run``)
    repr: NotRequired[str | None]  # its repr; an ``init``'s words for the group made
    values: NotRequired[dict[str, Packed]]  # ``pull``
    seconds: NotRequired[float]
    peak_memory: NotRequired[int | None]  # bytes: torch's peak on the rank's GPU
    collectives: NotRequired[int | None]  # torch collectives the rank entered in this message (None: unknown)
    parked: NotRequired[dict[str, Any]]  # a park's figures: bytes, seconds, the group ended, steps
    held: NotRequired[list[dict[str, Any]]]  # ``held``: name, what, description, size, devices, also
    pools: NotRequired[dict[str, int]]  # ``held``: its pools' figures (``held_by_name.pool_figures``)
    # the host's part
    lines: NotRequired[list[Line]]
    line_count: NotRequired[int]
    ended: NotRequired[bool]  # the rank process ended before it answered
    exit_code: NotRequired[int | None]
    oom: NotRequired[bool]  # ended by the OOM killer
    before: NotRequired[bool]  # it ended before its REPL took the command, which never ran


class Ready(TypedDict):
    op: Literal["ready"]
    pid: int


class Started(TypedDict):
    op: Literal["started"]
    id: int | None


RankSays = Ready | Started | Reply  # on the command pipe


class RankStarted(TypedDict):
    """The host's answer to a rank's start: its process, and where the kernel's cell channel listens."""

    pid: int
    channel: tuple[str, int, bytes] | None  # host, port, token; None where the worker's comm is not plain TCP


def ended_reply(exit_code: int | None, *, oom: bool, before: bool) -> Reply:
    """The reply for a command whose rank process ended before it answered."""
    return {
        "op": "done",
        "ok": False,
        "ended": True,
        "exit_code": exit_code,
        "oom": oom,
        "error": None,
        "before": before,
    }


NEVER_RAN = "stopped before it ran"  # the message of a cell stopped before its message reached the rank


def stopped_reply() -> Reply:
    """The reply for a cell stopped before its message reached the rank: it never ran (no time, no collective)."""
    error: RankError = {"type": "KeyboardInterrupt", "message": NEVER_RAN, "traceback": "", "interrupted": True}
    return {"op": "done", "ok": False, "error": error, "value": None, "repr": None, "collectives": 0}


# -- the control pipe: questions while a cell runs ---------------------------------------------------------------
class Question(TypedDict):
    op: Literal["where", "abort"]
    id: int


class Pending(TypedDict):
    """The collective a rank waits in: its name and number (``guess``: the last it entered, no recorder; then
    ``unnamed`` says why the flight recorder could not name it)."""

    name: str
    seq: int
    guess: NotRequired[bool]
    unnamed: NotRequired[str]


class Collective(TypedDict, total=False):
    """A rank's ``torch.distributed`` group: its backend, how many collectives it entered, the one it waits in,
    and whether it was aborted here."""

    backend: str
    seq: int
    aborted: bool
    pending: Pending


class Where(TypedDict):
    """Where a rank's main thread is, in words, and its group's state."""

    text: str
    collective: NotRequired[Collective | None]


class WhereAnswer(Where):
    op: Literal["where"]
    id: int


class AbortAnswer(TypedDict):
    op: Literal["abort"]
    id: int
    aborted: bool  # the rank had a group, now aborted


# -- host -> kernel: events and probes ---------------------------------------------------------------------------
class LinesEvent(TypedDict):
    """A rank's lines since its last event, and the live state of a line redrawn with ``\\r`` (stream -> text)."""

    rank: int
    cell: str | None
    lines: list[Line]
    progress: NotRequired[dict[str, str]]


class ExitedEvent(TypedDict):
    """A rank process ended by itself (not ended by its host)."""

    rank: int
    exited: int | None  # its exit code, or minus the signal
    oom: bool
    pid: int


Event = LinesEvent | ExitedEvent


class ProbedGpu(TypedDict):
    uuid: str
    cuda_id: str
    name: str


class Probe(TypedDict):
    """What a worker says of itself before a world is made."""

    host: str
    name: str
    pid: int
    visible: str | None  # its CUDA_VISIBLE_DEVICES
    gpu: ProbedGpu | None
    has_torch: bool
    has_jax: bool
