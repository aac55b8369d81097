"""What the server knows about its kernels: their process ids, the notebooks they run for, and which of the
user's discovery records are its own kernels' (the runtime directory holds every kernel's of the user: other
servers', jupyter_client's, IPython's)."""

from __future__ import annotations

from collections.abc import Collection, Iterable
from typing import Any, TypeVar

from jupyter_core.utils import ensure_async
from tornado.web import HTTPError

from gpu_magics.text.units import dropped


def kernel_pids(kernel_manager: Any) -> dict[int, str]:
    """Kernel process id -> kernel id, for kernels this server started locally."""
    pids: dict[int, str] = {}
    if kernel_manager is None:
        return pids
    for kernel_id in list(kernel_manager.list_kernel_ids()):
        try:
            pid = _pid(kernel_manager.get_kernel(kernel_id))
            if pid is not None:
                pids[pid] = kernel_id
        except (KeyError, HTTPError) as error:  # a kernel gone while we look (jupyter_client's, jupyter_server's)
            dropped("reading a kernel's process id", error)
    return pids


def _pid(kernel: Any) -> int | None:
    provisioner = getattr(kernel, "provisioner", None)
    for owner in (provisioner, getattr(provisioner, "process", None), getattr(kernel, "kernel", None)):
        pid = getattr(owner, "pid", None)
        if isinstance(pid, int) and pid > 0:
            return pid
    return None


async def kernel_paths(session_manager: Any) -> dict[str, str]:
    """Kernel id -> the path of the notebook (or console, file) its session is for."""
    paths: dict[str, str] = {}
    if session_manager is None:
        return paths
    try:
        for session in await ensure_async(session_manager.list_sessions()):
            kernel = session.get("kernel") or {}
            if kernel.get("id") and session.get("path"):
                paths[str(kernel["id"])] = str(session["path"])
    except Exception as error:  # the session manager may fail any way: notebooks go unnamed
        dropped("listing the sessions", error)
    return paths


def running_kernel_ids(kernel_manager: Any) -> set[str]:
    if kernel_manager is None:
        return set()
    return {str(kernel_id) for kernel_id in kernel_manager.list_kernel_ids()}


Record = TypeVar("Record", bound=Any)  # ClusterRecord or KernelRecord: both say their kernel_id


def ours(records: Iterable[Record], running: Collection[str]) -> list[Record]:
    """The records of ``records`` written by kernels this server runs (``running``: its kernel ids)."""
    return [record for record in records if record.kernel_id is not None and record.kernel_id in running]


def not_ours(records: Iterable[Record], running: Collection[str]) -> list[Record]:
    """The rest: kernels of the same user that this server does not run."""
    return [record for record in records if record.kernel_id is None or record.kernel_id not in running]


def elsewhere_json(record: Any) -> dict[str, Any]:
    """A cluster of a kernel this server does not run, as the side panel's fold lists it (types.ts IClusterElsewhere):
    the cluster, and where its kernel runs (its process, host and connection file; its kernel id where it has one)."""
    return {
        "name": record.name,
        "kind": record.kind,
        "workers": record.workers,
        "scheduler_address": record.scheduler_address,
        "started_at": record.started_at,
        "pid": record.pid,
        "host": record.host,
        "connection_file": record.connection_file,
        "kernel_id": record.kernel_id,
    }
