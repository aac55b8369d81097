"""Reading a dask-jobqueue cluster object (made here or by the user): which job gives which workers."""

from __future__ import annotations

from typing import Any


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
