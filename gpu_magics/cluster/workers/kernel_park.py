"""This kernel's own CUDA context and arrays, parked with its cluster (``%gpucluster park``), and back before the next
execution: a cell, a silent request of the side panel, a widget's message (IPython's ``pre_execute``). Any of them
may touch a GPU, and in a parked process so much as an NVML read waits (seen on driver 580), so nothing runs here
until the kernel is back.

Its CuPy arrays (``kernel_arrays``) are copied to host memory first, with the workers' and the ranks' data, so the
driver checkpoints only the context; they come back after it. A process cannot checkpoint itself: the driver's steps on
this kernel are made by a short-lived helper process it starts (``python -m gpu_magics.cluster.workers.checkpoint``),
which also checks that the GPUs have room before a restore (one that finds too little memory may fail the process for
good). Where the GPUs are simulated, the driver's stand-in takes the steps here. A resume that fails (another process
took the GPU meanwhile) leaves the kernel parked: the next cell fails with its one line (``cell_gate``) and the one
after tries again. At exit, a parked kernel is resumed first, so that its exit's own CUDA and NVML work does not wait
forever.
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import logging
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

from gpu_magics.cluster.options import PROG
from gpu_magics.cluster.workers import checkpoint, kernel_arrays
from gpu_magics.monitor import reads_paused
from gpu_magics.text.errors import ClusterError
from gpu_magics.text.units import dropped, format_bytes, format_seconds

HELPER_TIMEOUT_S = 120.0
READS_WAIT_S = 10.0  # how long a park waits for this process's NVML reads under way


@dataclasses.dataclass(frozen=True)
class KernelParked:
    """The kernel's GPU memory given back (by GPU UUID, as NVML listed it), and when."""

    by_gpu: dict[str, int]
    since: float

    @property
    def released(self) -> int:
        return sum(self.by_gpu.values())


_parked: KernelParked | None = None
_failed: str | None = None  # the last resume's failure, said by the next cell (then tried again)
_lock = threading.Lock()
_exit_hook: list[bool] = []
last_resume: dict[str, float] = {}  # the last resume's seconds: the driver's, the arrays' copies (benchmarks)


def parked() -> KernelParked | None:
    return _parked


def held() -> dict[str, int]:
    """The GPU memory this kernel holds now, by GPU UUID (one read of NVML's process lists; no CUDA call)."""
    from gpu_magics.cluster.workers.kernel_context import processes_memory

    found = processes_memory([os.getpid()]).get(os.getpid(), {})
    return {uuid: used for uuid, used in found.items() if used}


def park(by_gpu: dict[str, int]) -> None:
    """Checkpoint this kernel's GPU state alone (``by_gpu``: what NVML lists it holding; its arrays were copied out
    already). A ``CheckpointError`` says why the driver refused; the kernel then runs on as it was, its arrays
    back."""
    _, refused = park_together(by_gpu, {})
    if refused is not None:
        raise checkpoint.CheckpointError(refused)


def park_together(by_gpu: dict[str, int], others: dict[str, int]) -> tuple[dict[str, str], str | None]:
    """Checkpoint this kernel's GPU state and the ``others`` (name -> pid: its workers and ranks) at once, the
    driver's steps all made by the helper (this kernel makes no driver call while it may be locked): the reasons of
    the others refused, by name, and this kernel's own (``None``: parked; refused, it runs on as it was, its arrays
    back)."""
    global _parked
    with _lock:
        if _parked is not None:
            return {}, None
        reads_paused.pause(READS_WAIT_S)
        pids = [os.getpid(), *others.values()]
        try:
            driver = checkpoint.driver()
            if isinstance(driver, checkpoint.StandInCheckpoint):
                refused = checkpoint.park_all(driver, pids)
            else:
                refused = _helper_park_all(pids)
        except BaseException:  # an interrupt, a helper that failed: as if the kernel was refused (it runs on)
            reads_paused.unpause()
            _arrays_back()
            raise
        own = refused.pop(os.getpid(), None)
        if own is not None:
            reads_paused.unpause()
            _arrays_back()
        else:
            _parked = KernelParked(dict(by_gpu), time.time())
            _exit_resume_registered()
        by_pid = {pid: name for name, pid in others.items()}
        return {by_pid[pid]: why for pid, why in refused.items() if pid in by_pid}, own


def _arrays_back() -> None:
    try:
        kernel_arrays.reload()
    except kernel_arrays.DriverError as error:  # the GPU taken meanwhile: they stay in host memory
        dropped("copying this kernel's arrays back after a refused park", error, level=logging.WARNING)


def _exit_resume_registered() -> None:
    if not _exit_hook:  # registered at the first park: it runs before the handlers registered earlier
        atexit.register(_resume_at_exit)
        _exit_hook.append(True)


def _helper_park_all(pids: list[int]) -> dict[int, str]:
    import json

    said = _helper("park-all", [str(pid) for pid in pids])
    try:
        return {int(pid): str(why) for pid, why in json.loads(said.strip().splitlines()[-1]).items()}
    except (ValueError, IndexError, AttributeError) as error:
        raise checkpoint.CheckpointError(f"the helper process said what it did unclearly ({error})") from None


def resume() -> str | None:
    """Bring the kernel's GPU state back; its one line (``None`` where it was not parked). A ``ClusterError``
    says why it could not, the kernel staying parked."""
    global _failed
    began = time.perf_counter()
    try:
        state = restore()
    except checkpoint.CheckpointError as error:
        _failed = (
            f"{PROG}: this kernel's GPU memory could not come back ({error}); nothing ran: free GPU memory, then run "
            "the cell again (or restart the kernel, which gives up what it held)"
        )
        raise ClusterError(_failed) from None
    if state is None:
        return None
    return (
        f"{PROG}: this kernel's {format_bytes(state.released)} of GPU memory came back in "
        f"{format_seconds(time.perf_counter() - began)}"
    )


def restore() -> KernelParked | None:
    """The driver's steps that bring the kernel back; what had been parked (``None``: nothing). A
    ``CheckpointError`` says why they could not."""
    global _parked, _failed
    with _lock:
        state = _parked
        if state is None:
            return None
        began = time.perf_counter()
        _resume_steps(state)  # (once resumed, again a no-op)
        reads_paused.unpause()
        try:
            moved = kernel_arrays.reload()
        except kernel_arrays.DriverError as error:  # kept in host memory: the next execution tries again
            raise checkpoint.CheckpointError(f"its arrays could not be mapped again: {error}") from None
        last_resume.update(driver=round(moved["began"] - began, 3), copies=round(moved["seconds"], 3))
        _parked, _failed = None, None
        return state


def before_execute() -> None:
    """IPython's ``pre_execute``: a parked kernel back before anything runs, said in the output at hand; a failure
    is kept for the cell's gate, which fails the cell with it."""
    global _failed
    if _parked is None:
        return
    from gpu_magics.text.said import say

    try:
        said = resume()
    except ClusterError:
        return
    except KeyboardInterrupt:  # the stop came during the resume: parked still, said by the gate, tried again next
        _failed = f"{PROG}: the stop came while this kernel's GPU memory was coming back; nothing ran: run it again"
        return
    if said is not None:
        say(said)


def take_failure() -> str | None:
    """The last resume's failure where the kernel is still parked (the cell's gate raises it)."""
    return _failed if _parked is not None else None


def _resume_steps(state: KernelParked) -> None:
    driver = checkpoint.driver()
    pid = os.getpid()
    if isinstance(driver, checkpoint.StandInCheckpoint):  # simulated GPUs: the stand-in's steps, here
        checkpoint.resume_process(driver, pid)
        return
    # each GPU must have room for what comes back there
    _helper("resume", [str(pid), str(max(state.by_gpu.values(), default=0)), *state.by_gpu])


def _helper(verb: str, args: list[str]) -> str:
    """The driver's steps on this kernel, made by a process it starts; what it printed."""
    root = str(Path(checkpoint.__file__).resolve().parents[3])  # where ``gpu_magics`` is imported from
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))}
    try:
        done = subprocess.run(
            [sys.executable, "-m", checkpoint.__name__, verb, *args],
            capture_output=True,
            text=True,
            env=env,
            timeout=HELPER_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as error:
        raise checkpoint.CheckpointError(f"the helper process failed: {error}") from None
    if done.returncode != 0:
        lines = (done.stderr or "").strip().splitlines()
        raise checkpoint.CheckpointError(lines[-1] if lines else f"the helper process ended with {done.returncode}")
    return done.stdout or ""


def _resume_at_exit() -> None:
    with contextlib.suppress(ClusterError):  # it exits all the same: the driver frees a parked process's memory
        resume()


def install(shell: object) -> None:
    """Resume a parked kernel before each execution (at ``%load_ext``)."""
    events = getattr(shell, "events", None)
    if events is not None and before_execute not in events.callbacks.get("pre_execute", []):
        events.register("pre_execute", before_execute)


def uninstall(shell: object) -> None:
    """No more (``%unload_ext``); a parked kernel comes back first."""
    events = getattr(shell, "events", None)
    if events is not None and before_execute in events.callbacks.get("pre_execute", []):
        events.unregister("pre_execute", before_execute)
    _resume_at_exit()
