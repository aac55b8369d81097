"""Where a kernel this server does not run belongs, and whose a process is.

A kernel of the user's on this host says in its environment which notebook it runs for (``JPY_SESSION_NAME``, set
by the Jupyter server that started it) and which process started it (``JPY_PARENT_PID``, set by jupyter_client);
that process, when it is a Jupyter server, left its URL in the runtime directory (``jpserver-<pid>.json``). A
process no kernel of the user's holds is the user's own or another user's, as its account says. Reading
``/proc`` (psutil): call these off the event loop.
"""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path

from gpu_magics.cluster.records.record import ClusterRecord, KernelRecord
from gpu_magics.server.ownership.owners import GpuHolder
from gpu_magics.text.units import dropped


@dataclass(frozen=True)
class KernelPlace:
    """A kernel's notebook (relative to its server's root where it lies under it) and its server's URL."""

    notebook: str | None = None
    server: str | None = None


def jupyter_servers(runtime_dir: str | None = None) -> dict[int, dict[str, str]]:
    """The Jupyter servers of this user on this host, by process id: their ``url`` and ``root_dir`` (from their
    ``jpserver-<pid>.json``; none is deleted here)."""
    if runtime_dir is None:
        from jupyter_core.paths import jupyter_runtime_dir

        runtime_dir = jupyter_runtime_dir()
    servers: dict[int, dict[str, str]] = {}
    for path in Path(runtime_dir).glob("jpserver-*.json"):
        try:
            info = json.loads(path.read_text(encoding="utf-8"))
            servers[int(info["pid"])] = {"url": str(info.get("url") or ""), "root_dir": str(info.get("root_dir") or "")}
        except (OSError, ValueError, KeyError, TypeError) as error:  # one being written, or not a server's
            dropped(f"reading {path.name}", error)
    return servers


def kernel_place(pid: int, host: str | None, servers: dict[int, dict[str, str]]) -> KernelPlace:
    """Where the kernel of process ``pid`` (on ``host``; ``None``: unknown) belongs; empty where its environment
    cannot be read (another host, another user, gone)."""
    import psutil

    if host is not None and host != socket.gethostname():
        return KernelPlace()
    try:
        environment = psutil.Process(pid).environ()
    except (psutil.Error, OSError) as error:
        dropped("reading a kernel's environment", error)
        return KernelPlace()
    notebook = environment.get("JPY_SESSION_NAME") or None
    parent = environment.get("JPY_PARENT_PID", "")
    server = servers.get(int(parent)) if parent.isdigit() else None
    if server is None:
        return KernelPlace(notebook=notebook)
    root = server["root_dir"]
    if notebook and root and os.path.isabs(notebook) and _under(notebook, root):
        notebook = os.path.relpath(notebook, root)
    return KernelPlace(notebook=notebook, server=server["url"] or None)


def _under(path: str, root: str) -> bool:
    try:
        return os.path.commonpath([os.path.realpath(path), os.path.realpath(root)]) == os.path.realpath(root)
    except ValueError:  # different drives
        return False


def process_user(pid: int) -> tuple[str | None, bool | None]:
    """The account process ``pid`` runs as, and whether it is this server's: ``(None, None)`` where the process
    cannot be seen (gone, or in another container: NVML gives the host's process ids)."""
    import psutil

    try:
        process = psutil.Process(pid)
        uid = process.uids().real
        try:
            name: str | None = process.username()
        except (KeyError, psutil.Error):  # a uid without a name (containers)
            name = str(uid)
    except (psutil.Error, OSError) as error:
        dropped("reading a process's account", error)
        return None, None
    return name, uid == os.getuid()


def with_whereabouts(
    elsewhere: Iterable[GpuHolder], records: Iterable[ClusterRecord], kernels: Iterable[KernelRecord]
) -> list[GpuHolder]:
    """``elsewhere`` (processes of the user's kernels this server does not run), each with its kernel's notebook
    (as ``path``) and server where they can be told."""
    records = list(records)
    kernel_of: dict[str, tuple[int, str | None]] = {}
    written: list[ClusterRecord | KernelRecord] = [*records, *kernels]
    for record in written:
        if record.kernel_id:
            kernel_of[record.kernel_id] = (record.pid, record.host)
    cluster_of = {record.name: (record.pid, record.host) for record in records}
    servers: dict[int, dict[str, str]] | None = None
    places: dict[int, KernelPlace] = {}
    placed = []
    for holder in elsewhere:
        if holder.role == "kernel":
            kernel: tuple[int, str | None] | None = (holder.pid, holder.host or socket.gethostname())
        else:
            kernel = kernel_of.get(holder.kernel_id or "") or cluster_of.get(holder.cluster or "")
        if kernel is not None and kernel[0] not in places:
            servers = jupyter_servers() if servers is None else servers
            places[kernel[0]] = kernel_place(kernel[0], kernel[1], servers)
        place = places.get(kernel[0]) if kernel is not None else None
        if place is not None:
            holder = replace(holder, path=holder.path or place.notebook, server=place.server)
        placed.append(holder)
    return placed


def with_users(holders: Iterable[GpuHolder], simulated: bool) -> list[GpuHolder]:
    """``holders``, those that no kernel of the user's holds (role ``other``) on this host with the account they run
    as. On simulated GPUs their processes (but the server's own) stand for other users' jobs: no account is named."""
    found = []
    for holder in holders:
        if holder.role == "other" and holder.host is None:
            user: str | None
            yours: bool | None
            if simulated and holder.pid != os.getpid():
                user, yours = None, False
            else:
                user, yours = process_user(holder.pid)
            holder = replace(holder, user=user, yours=yours)
        found.append(holder)
    return found


def places_of(records: Iterable[ClusterRecord]) -> list[KernelPlace]:
    """Where the kernel of each of ``records`` (clusters of kernels this server does not run) belongs."""
    records = list(records)
    servers = jupyter_servers() if records else {}
    return [kernel_place(record.pid, record.host, servers) for record in records]
