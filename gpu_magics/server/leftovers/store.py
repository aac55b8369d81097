"""The recorded processes on disk, so that a server that starts again still knows what the kernels of the one
before started: ``gpu-magics-server-<pid>-processes.json`` in the runtime directory (mode 0600, written atomically),
read back once at start from servers that have ended (then removed). A file that cannot be read is left out."""

from __future__ import annotations

import contextlib
import json
import os
import time
from pathlib import Path
from typing import Any

from gpu_magics.cluster.records.record import runtime_dir
from gpu_magics.server.leftovers.registry import START_TOLERANCE, Started, process_table

PREFIX = "gpu-magics-server-"
SUFFIX = "-processes.json"
MAX_BYTES = 8 * 2**20  # a larger file is not one this server wrote


def own_path() -> Path:
    return runtime_dir() / f"{PREFIX}{os.getpid()}{SUFFIX}"


def save(entries: list[Started], path: Path | None = None) -> None:
    """Write ``entries`` for this server (replacing its file); an empty list removes the file."""
    path = path or own_path()
    if not entries:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
        return
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    data = {"pid": os.getpid(), "processes": [_entry_json(entry) for entry in entries]}
    temporary = path.with_name(f".{path.name}.{time.monotonic_ns()}.tmp")
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "w", encoding="utf-8") as file:
        json.dump(data, file)
    os.replace(temporary, path)


def _entry_json(entry: Started) -> dict[str, Any]:
    return {"pid": entry.pid, "started": entry.started, "name": entry.name, "kernel_id": entry.kernel_id,
            "kernel_pid": entry.kernel_pid, "kernel_started": entry.kernel_started}  # fmt: skip


def load_ended_servers() -> list[Started]:
    """What servers that have ended recorded, of processes that still run (their files are removed once read)."""
    directory = runtime_dir()
    if not directory.is_dir():
        return []
    table = process_table()
    found = []
    for path in directory.glob(f"{PREFIX}*{SUFFIX}"):
        server = path.name[len(PREFIX) : -len(SUFFIX)]
        if not server.isdigit() or int(server) == os.getpid() or int(server) in table:
            continue  # this server's, or a server that still runs
        found.extend(_read(path, table))
        with contextlib.suppress(OSError):
            path.unlink()
    return found


def _read(path: Path, table: dict[int, tuple[int, float, str]]) -> list[Started]:
    try:
        if path.stat().st_size > MAX_BYTES:
            return []
        data = json.loads(path.read_text(encoding="utf-8"))
        entries = [_entry(item) for item in data["processes"]]
    except (OSError, ValueError, KeyError, TypeError, AttributeError, RecursionError):  # not a file this server wrote
        return []
    return [e for e in entries if e.pid in table and abs(table[e.pid][1] - e.started) <= START_TOLERANCE]


def _entry(item: dict[str, Any]) -> Started:
    pid, started, name = int(item["pid"]), float(item["started"]), str(item["name"])
    return Started(pid, started, name, str(item["kernel_id"]), int(item["kernel_pid"]), float(item["kernel_started"]))
