"""In the kernel: the CUDA driver's checkpoint of another process's GPU state (driver 570 and later).

A process is parked in two steps, each a driver call made from another process: ``lock`` (its CUDA calls wait from
then on) and ``checkpoint`` (its GPU memory goes to host memory and the GPU is released: NVML lists it no more);
``restore`` (its memory back on the same GPU) and ``unlock`` (its CUDA calls go on) resume it. Its Python threads
run on meanwhile, so a parked Dask worker keeps its heartbeats and its data's keys; only a CUDA call waits. The
driver refuses a process that uses managed memory or CUDA IPC, and a restore that cannot get its memory back.

``driver()`` gives the driver's own calls (``libcuda`` through ctypes, loaded on first use, never at import) or,
where the GPUs are simulated (``$GPU_MAGICS_SOURCE`` ``fake:N``), a stand-in that keeps each process's state in
this process and fails where ``$GPU_MAGICS_CHECKPOINT_FAIL`` names a step and a pid (``checkpoint:1234``; ``@path``:
as that file says, while it exists), so the choices and lines above it are tested on machines without a GPU.
"""

from __future__ import annotations

import ctypes
import os
import threading
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from gpu_magics.monitor.models import GpuSource

DRIVER_LIBRARY = "libcuda.so.1"
NEWEST_WITHOUT_IT = 12080  # cuDriverGetVersion's number of the last driver without the calls (CUDA 12.8: 570)
LOCK_TIMEOUT_MS = 10_000  # how long a lock waits for the process's work under way on its GPU
FAIL_ENV = "GPU_MAGICS_CHECKPOINT_FAIL"
STATES = {0: "running", 1: "locked", 2: "checkpointed", 3: "failed"}


class CheckpointError(Exception):
    """A driver call refused a process; the message says why, in words."""


class ProcessCheckpoint(Protocol):
    """The driver's four steps on a process, and its state ("running", "locked", "checkpointed", "failed")."""

    def state(self, pid: int) -> str: ...
    def lock(self, pid: int) -> None: ...
    def checkpoint(self, pid: int) -> None: ...
    def restore(self, pid: int) -> None: ...
    def unlock(self, pid: int) -> None: ...


class _LockArgs(ctypes.Structure):
    _fields_ = [("timeoutMs", ctypes.c_uint), ("reserved0", ctypes.c_uint), ("reserved1", ctypes.c_uint64 * 7)]


# what the driver's refusals mean for a user (CUresult numbers)
_REASONS = {
    1: "the driver refused the call (invalid value)",
    3: "the CUDA driver is not started in this kernel",
    201: "it has no CUDA context",
    401: "its state does not allow it (illegal state)",
    801: "the driver does not support it here (managed memory, CUDA IPC, or a MIG slice)",
    2: "the GPU has not enough free memory to take it back",
}


class CudaCheckpoint:
    """The driver's own calls, through ``libcuda``; a driver without them is said at the first call."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._library: ctypes.CDLL | None = None

    def _driver(self) -> ctypes.CDLL:
        with self._lock:
            if self._library is None:
                try:
                    library = ctypes.CDLL(DRIVER_LIBRARY)
                except OSError as error:
                    raise CheckpointError(f"no CUDA driver on this host ({error})") from None
                version = ctypes.c_int(0)
                library.cuInit(0)
                library.cuDriverGetVersion(ctypes.byref(version))
                if version.value <= NEWEST_WITHOUT_IT or not hasattr(library, "cuCheckpointProcessLock"):
                    raise CheckpointError(
                        f"the NVIDIA driver (CUDA {version.value // 1000}.{version.value % 1000 // 10}) cannot park a "
                        "process: it takes driver 570 or later"
                    )
                self._library = library
            return self._library

    def _call(self, name: str, pid: int, *args: object) -> None:
        result = getattr(self._driver(), name)(ctypes.c_int(pid), *args)
        if result != 0:
            raise CheckpointError(_REASONS.get(result, f"the driver answered error {result}"))

    def state(self, pid: int) -> str:
        found = ctypes.c_int(-1)
        self._call("cuCheckpointProcessGetState", pid, ctypes.byref(found))
        return STATES.get(found.value, "unknown")

    def lock(self, pid: int) -> None:
        self._call("cuCheckpointProcessLock", pid, ctypes.byref(_LockArgs(timeoutMs=LOCK_TIMEOUT_MS)))

    def checkpoint(self, pid: int) -> None:
        self._call("cuCheckpointProcessCheckpoint", pid, None)

    def restore(self, pid: int) -> None:
        self._call("cuCheckpointProcessRestore", pid, None)

    def unlock(self, pid: int) -> None:
        self._call("cuCheckpointProcessUnlock", pid, None)


class StandInCheckpoint:
    """The four steps for simulated GPUs: each process's state kept here, the same refusals as the driver's for a
    step its state does not allow, and the failures ``$GPU_MAGICS_CHECKPOINT_FAIL`` asks for (``step:pid``,
    comma-separated)."""

    def __init__(self) -> None:
        self._states: dict[int, str] = {}
        self._guard = threading.Lock()

    def _step(self, step: str, pid: int) -> None:
        wanted = {part.strip() for part in _failures().split(",") if part.strip()}
        if f"{step}:{pid}" in wanted:
            raise CheckpointError(f"the driver refused to {step} it (asked by ${FAIL_ENV})")
        before, after = _STEPS[step]
        with self._guard:
            if self._states.get(pid, "running") != before:
                raise CheckpointError(_REASONS[401])
            self._states[pid] = after

    def state(self, pid: int) -> str:
        with self._guard:
            return self._states.get(pid, "running")

    def lock(self, pid: int) -> None:
        self._step("lock", pid)

    def checkpoint(self, pid: int) -> None:
        self._step("checkpoint", pid)

    def restore(self, pid: int) -> None:
        self._step("restore", pid)

    def unlock(self, pid: int) -> None:
        self._step("unlock", pid)


def _failures() -> str:
    """What ``$GPU_MAGICS_CHECKPOINT_FAIL`` asks for; ``@path``: what that file says now (none where it is gone),
    so that a test can end a failure from outside the process."""
    given = os.environ.get(FAIL_ENV, "")
    if not given.startswith("@"):
        return given
    try:
        with open(given[1:], encoding="utf-8") as named:
            return named.read()
    except OSError:
        return ""


_STEPS = {  # each step: the state it needs, the state it leaves (the driver's own state machine)
    "lock": ("running", "locked"),
    "checkpoint": ("locked", "checkpointed"),
    "restore": ("checkpointed", "locked"),
    "unlock": ("locked", "running"),
}
_chosen: ProcessCheckpoint | None = None


def driver() -> ProcessCheckpoint:
    """The driver's calls for this kernel: the stand-in where the GPUs are simulated, else ``libcuda``'s."""
    global _chosen
    if _chosen is None:
        from gpu_magics.monitor.sources import source_from_env

        _chosen = StandInCheckpoint() if source_from_env().kind == "fake" else CudaCheckpoint()
    return _chosen


def park_process(calls: ProcessCheckpoint, pid: int) -> None:
    """Lock and checkpoint the process (a refusal leaves it running, unlocked)."""
    calls.lock(pid)
    try:
        calls.checkpoint(pid)
    except CheckpointError:
        calls.unlock(pid)  # locked only: it goes on as it was
        raise


def resume_process(calls: ProcessCheckpoint, pid: int) -> None:
    """From wherever the process got (a resume tried before may have brought some back): running again."""
    state = calls.state(pid)
    if state == "checkpointed":
        calls.restore(pid)
        state = "locked"
    if state == "locked":
        calls.unlock(pid)


def park_all(calls: ProcessCheckpoint, pids: list[int]) -> dict[int, str]:
    """Lock and checkpoint every process at once; the reason for each that was refused (it runs on, unlocked)."""
    import concurrent.futures

    failed: dict[int, str] = {}
    if not pids:
        return failed
    with concurrent.futures.ThreadPoolExecutor(len(pids), thread_name_prefix="gpu-magics-park") as pool:
        futures = {pool.submit(park_process, calls, pid): pid for pid in pids}
        for future in concurrent.futures.as_completed(futures):
            error = future.exception()
            if isinstance(error, CheckpointError):
                failed[futures[future]] = str(error)
            elif error is not None:
                failed[futures[future]] = f"the driver call failed: {error}"
    return failed


def main(argv: list[str]) -> int:
    """``python -m gpu_magics.cluster.workers.checkpoint park|resume PID [BYTES UUID...]``: the driver's steps on a
    process that cannot make them itself (the kernel parks its own context through this helper). ``resume`` first
    checks that each GPU named has ``BYTES`` free (NVML), as a restore that finds too little memory can fail the
    process for good. Exit status 0, or 1 with the reason on standard error. ``park-all PID...`` parks them all at
    once (the kernel with its workers and ranks, making no driver call itself meanwhile) and prints, as one JSON line,
    the reason for each pid refused."""
    import json
    import sys

    verb, pid = argv[0], int(argv[1])
    calls = CudaCheckpoint()
    if verb == "park-all":
        print(json.dumps({str(refused): why for refused, why in park_all(calls, [int(a) for a in argv[1:]]).items()}))
        return 0
    try:
        if verb == "park":
            park_process(calls, pid)
        elif verb == "resume":
            short = _short_of_memory(int(argv[2]), argv[3:]) if len(argv) > 2 else None
            if short is not None:
                raise CheckpointError(short)
            resume_process(calls, pid)
        else:
            raise CheckpointError(f"unknown step {verb!r}: park or resume")
    except CheckpointError as error:
        print(error, file=sys.stderr)
        return 1
    return 0


def _short_of_memory(needed: int, uuids: list[str]) -> str | None:
    """Where a GPU among ``uuids`` has less than ``needed`` bytes free (NVML, every GPU of the host), in words."""
    from gpu_magics.monitor.nvml import NvmlSource

    return short_of_memory(dict.fromkeys(uuids, needed), free_by_gpu(NvmlSource(visible_devices=None)))


RESTORE_MARGIN = 64 << 20  # a restore is asked for only where this much more than it brings back is free (and 5%)


def short_of_memory(needs: dict[str, int], free: dict[str, int]) -> str | None:
    """Where a GPU (by UUID) has less free than a restore brings back there, with a margin, in words; else ``None``
    (a GPU whose free memory cannot be read is not held against it)."""
    from gpu_magics.text.units import format_bytes

    for uuid, needed in needs.items():
        have = free.get(uuid)
        if have is not None and needed > 0 and have < needed * 1.05 + RESTORE_MARGIN:
            return f"GPU {uuid} has {format_bytes(have)} free, and {format_bytes(needed)} must come back"
    return None


def free_by_gpu(source: GpuSource | None = None) -> dict[str, int]:
    """The free memory of each GPU, by UUID, from one read of ``source`` (default: the source the package reads)."""
    from gpu_magics.monitor.sources import default_source

    made = source if source is not None else default_source()
    try:
        readings, _ = made.read(slow=False)
    finally:
        made.close()
    return {
        reading.uuid: reading.memory_total - reading.memory_used
        for reading in readings
        if reading.memory_total is not None and reading.memory_used is not None
    }


if __name__ == "__main__":
    import sys

    sys.exit(main(sys.argv[1:]))
