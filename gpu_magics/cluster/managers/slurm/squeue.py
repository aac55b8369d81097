"""Asking SLURM about jobs by id (``squeue``) and cancelling leftovers (``scancel``); submission itself is
dask-jobqueue's. Every call has a timeout and returns plain data; a missing or silent SLURM reads as no answer.
Also reading a dask-jobqueue cluster object (made here or by the user): which job gives which workers."""

from __future__ import annotations

import contextlib
import shutil
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

TIMEOUT_S = 15.0
ENDED = frozenset(
    {"completed", "failed", "cancelled", "timeout", "node_fail", "out_of_memory", "boot_fail", "deadline", "preempted"}
)
ALIVE = frozenset({"pending", "configuring", "running", "completing", "suspended", "requeued", "resizing"})


@dataclass(frozen=True)
class QueuedJob:
    """One job as ``squeue`` shows it."""

    job_id: str
    state: str  # lower case: "pending", "running", "failed", ...
    node: str | None
    reason: str | None


def sbatch_path() -> str | None:
    """Where ``sbatch`` is on PATH, or ``None``."""
    return shutil.which("sbatch")


def states(job_ids: Iterable[str]) -> dict[str, QueuedJob]:
    """The jobs SLURM still knows of among ``job_ids`` (recently ended ones too), by id; those it forgot are
    left out. Asked one by one only when SLURM refuses the list (it does when none of them is known)."""
    ids = sorted(set(job_ids), key=lambda job: (len(job), job))
    if not ids:
        return {}
    found = _squeue(ids)
    if found is None:
        found = {}
        for job_id in ids:
            found.update(_squeue([job_id]) or {})
    return found


def _squeue(ids: list[str]) -> dict[str, QueuedJob] | None:
    command = ["squeue", "-h", "--states=all", "-j", ",".join(ids), "-o", "%i|%T|%N|%r"]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if done.returncode != 0:
        return None
    found = {}
    for line in done.stdout.splitlines():
        parts = line.strip().split("|")
        if len(parts) != 4:
            continue
        job_id, state, node, reason = parts
        state = state.lower()
        found[job_id] = QueuedJob(
            job_id=job_id,
            state=state,
            node=node or None,
            reason=None if state != "pending" or reason in ("", "None") else reason,
        )
    return found


def cancel(job_ids: Iterable[str]) -> None:
    """``scancel`` the jobs (a job already gone is fine)."""
    ids = sorted(set(job_ids))
    if ids:
        with contextlib.suppress(OSError, subprocess.TimeoutExpired):
            subprocess.run(["scancel", *ids], capture_output=True, timeout=TIMEOUT_S, check=False)


def test_submit(script: str) -> str | None:
    """Have SLURM check a batch script without queueing it (``sbatch --test-only``): ``None`` when it would
    take it, else SLURM's own message, in one line."""
    try:
        done = subprocess.run(
            ["sbatch", "--test-only"], input=script, capture_output=True, text=True, timeout=TIMEOUT_S, check=False
        )
    except subprocess.TimeoutExpired:
        return f"sbatch --test-only did not answer within {TIMEOUT_S:g} s"
    except OSError as error:
        return str(error)
    if done.returncode == 0:
        return None
    lines = [line.strip().removeprefix("sbatch: error: ").removeprefix("sbatch: ") for line in done.stderr.splitlines()]
    return "; ".join(line for line in lines if line) or f"sbatch exited with status {done.returncode}"


def job_workers(cluster: Any) -> dict[str, set[str]]:
    """Job id -> the names its workers register with (one per process of the job); jobs not submitted yet
    (no id) are left out."""
    found: dict[str, set[str]] = {}
    spec = getattr(cluster, "worker_spec", {}) or {}
    for name, job in list((getattr(cluster, "workers", {}) or {}).items()):
        job_id = getattr(job, "job_id", None)
        if not job_id:
            continue
        group = (spec.get(name) or {}).get("group")
        found[str(job_id)] = {f"{name}{suffix}" for suffix in group} if group else {str(name)}
    return found


def submits_with(cluster: Any, command: str) -> bool:
    """Whether ``cluster`` is a dask-jobqueue cluster whose jobs are submitted with ``command`` (``sbatch``)."""
    job_cls = getattr(cluster, "job_cls", None)
    return str(getattr(job_cls, "submit_command", "") or "").split(" ")[0].endswith(command)
