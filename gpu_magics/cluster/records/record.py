"""Discovery records: one small JSON file per running ``%gpucluster``, and one per kernel that holds GPU memory,
in the Jupyter runtime directory.

The server extension lists them (``list_records``, ``list_kernel_records``) to show which kernel started which
cluster and what each kernel holds on its GPUs. Files are private to the user (mode 0600, written atomically) and
named ``gpu-magics-cluster-<pid>-<name>.json`` and ``gpu-magics-kernel-<pid>.json``; a record whose process has
gone is removed when listed.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import socket
import sys
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

RUNTIME_DIR_ENV = "GPU_MAGICS_RUNTIME_DIR"
PREFIX = "gpu-magics-cluster-"
KERNEL_PREFIX = "gpu-magics-kernel-"
KERNEL_FILE_PREFIX = "kernel-"  # a connection file named by its kernel's id: kernel-<id>.json
# 2: members (the workers and their GPUs, from their own reports); 3: idle timeout; 4: manager, jobs and adaptive
# (--slurm, --from, adapt) and the backend plain cells run on (%gpurun); 5: the manager's facts (owned, how it ends,
# scalable, restartable, where its workers come from, CPU or GPU workers), which every view reads instead of the kind;
# 6: the kernel id only where the kernel's connection file names one (``kernel-<id>.json``, as Jupyter's kernel
# managers write it), the connection file's name and the host (where a kernel no server runs is); ``parked`` is
# optional within 6 (a reader that knows it not reads the record as before)
SCHEMA_VERSION = 6
KERNEL_SCHEMA_VERSION = 2  # 2: as SCHEMA_VERSION 6 (the kernel id, connection file and host)


@dataclass(frozen=True)
class ClusterRecord:
    """What a kernel tells the server about the cluster it started or attached to."""

    name: str
    scheduler_address: str
    dashboard_url: str | None
    kind: str  # "gpu", "cpu", "attached", "slurm", "adopted" or "gateway"
    workers: int
    gpus: tuple[str, ...] = ()  # one entry per GPU worker: the device it was given (or its model, attached)
    pid: int = field(default_factory=os.getpid)
    kernel_id: str | None = None  # None: not a kernel of a Jupyter kernel manager (jupyter_client's own, IPython)
    started_at: float = field(default_factory=time.time)  # seconds since the epoch
    members: tuple[dict[str, Any], ...] = ()  # workers (and the kernel) with their GPUs: types.ts IClusterMember
    idle_timeout: float | None = None  # seconds without a task before it closes (attached: detaches); None: never
    idle_since: float | None = None  # since when it has run no task (seconds since the epoch); None: busy
    plain_cells: str | None = None  # the backend plain cells run on here (%gpurun multi-gpu), None: dask's own
    manager: str | None = None  # what gives the workers (--slurm, --from): "SLURM jobs", "KubeCluster", ...
    jobs: tuple[dict[str, Any], ...] = ()  # the batch jobs behind the workers: types.ts IClusterJob
    adaptive: tuple[int, int] | None = None  # adapt MIN MAX, while it adapts
    up_since: float | None = None  # when the cluster itself started, where before started_at (gateway --connect)
    facts: dict[str, Any] | None = None  # its manager's facts: info.ClusterFacts, types.ts IClusterFacts
    connection_file: str | None = None  # the kernel's connection file's name ("kernel-<id>.json", "tmpab12.json")
    host: str | None = None  # the host the kernel runs on
    parked: dict[str, Any] | None = None  # its workers parked (%gpucluster park): since, bytes, workers; None: not

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict (what the file holds, and what the server sends)."""
        data = asdict(self)
        data["gpus"] = list(self.gpus)
        data["members"] = [dict(member) for member in self.members]
        data["jobs"] = [dict(job) for job in self.jobs]
        data["adaptive"] = list(self.adaptive) if self.adaptive is not None else None
        data["version"] = SCHEMA_VERSION
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ClusterRecord:
        """The inverse of ``to_json``; ``KeyError``, ``TypeError`` or ``ValueError`` when malformed. An older
        record's kernel id that its connection file's name stood for is read as no kernel id (``origin``)."""
        kernel_id, connection_file = origin(data, SCHEMA_VERSION)
        return cls(
            name=str(data["name"]),
            scheduler_address=str(data["scheduler_address"]),
            dashboard_url=None if data.get("dashboard_url") is None else str(data["dashboard_url"]),
            kind=str(data["kind"]),
            workers=int(data["workers"]),
            gpus=tuple(str(gpu) for gpu in data.get("gpus", ())),
            pid=int(data["pid"]),
            kernel_id=kernel_id,
            started_at=float(data["started_at"]),
            members=tuple(dict(member) for member in data.get("members") or () if isinstance(member, dict)),
            idle_timeout=_number(data.get("idle_timeout")),
            idle_since=_number(data.get("idle_since")),
            plain_cells=None if data.get("plain_cells") is None else str(data["plain_cells"]),
            manager=None if data.get("manager") is None else str(data["manager"]),
            jobs=tuple(dict(job) for job in data.get("jobs") or () if isinstance(job, dict)),
            adaptive=_bounds(data.get("adaptive")),
            up_since=_number(data.get("up_since")),
            facts=_facts(data.get("facts")),
            connection_file=connection_file,
            host=_text(data.get("host")),
            parked=_parked(data.get("parked")),
        )

    @property
    def filename(self) -> str:
        """``gpu-magics-cluster-<pid>-<name>.json``."""
        return f"{PREFIX}{self.pid}-{self.name}.json"


def runtime_dir() -> Path:
    """``$GPU_MAGICS_RUNTIME_DIR``, else Jupyter's runtime directory."""
    override = os.environ.get(RUNTIME_DIR_ENV)
    if override:
        return Path(override)
    from jupyter_core.paths import jupyter_runtime_dir

    return Path(jupyter_runtime_dir())


def current_connection_file() -> str | None:
    """The name of the connection file of the Jupyter kernel this runs in, or ``None`` outside one."""
    if "ipykernel" not in sys.modules:
        return None
    try:
        from ipykernel.connect import get_connection_file
        from ipykernel.kernelapp import IPKernelApp

        if not IPKernelApp.initialized():
            return None
        return Path(get_connection_file()).name or None
    except (ImportError, RuntimeError, AttributeError):  # outside a kernel, or one without a connection file
        return None


def kernel_id_of(connection_file: str | None) -> str | None:
    """The kernel id a connection file's name carries: ``kernel-<id>.json`` as Jupyter's kernel managers (the
    server's among them) name it; ``None`` for any other name (jupyter_client's ``KernelManager`` on its own
    writes ``tmp<random>.json``: that kernel has no id a server knows)."""
    if connection_file is None:
        return None
    stem = Path(connection_file).stem
    if not stem.startswith(KERNEL_FILE_PREFIX):
        return None
    return stem.removeprefix(KERNEL_FILE_PREFIX) or None


def current_kernel_id() -> str | None:
    """The id of the Jupyter kernel this runs in (from its connection file's name), or ``None`` outside one and
    in a kernel whose connection file names no id (``kernel_id_of``)."""
    return kernel_id_of(current_connection_file())


def here() -> dict[str, Any]:
    """Where this process runs, as a record says it: ``kernel_id``, ``connection_file`` and ``host``."""
    connection_file = current_connection_file()
    return {"kernel_id": kernel_id_of(connection_file), "connection_file": connection_file, "host": _hostname()}


@functools.cache
def _hostname() -> str:
    return socket.gethostname()


def origin(data: dict[str, Any], version: int) -> tuple[str | None, str | None]:
    """A record's (kernel id, connection file name). Records older than ``version`` held the connection file's
    name, less any ``kernel-`` prefix, as the kernel id: one that is not a UUID (a ``tmp...`` name) stood for
    the file ``<it>.json`` and is no kernel id."""
    kernel_id = _text(data.get("kernel_id"))
    connection_file = _text(data.get("connection_file"))
    if _version(data) < version and kernel_id is not None and not _is_uuid(kernel_id):
        return None, connection_file or f"{kernel_id}.json"
    return kernel_id, connection_file


def _version(data: dict[str, Any]) -> int:
    value = data.get("version")
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _is_uuid(text: str) -> bool:
    try:
        uuid.UUID(text)
    except ValueError:
        return False
    return True


def _text(value: Any) -> str | None:
    return None if value is None else str(value)


_now = time.time


def _facts(value: Any) -> dict[str, Any] | None:
    """The manager's facts as written, read back through their one reader (``None``: none, or not a dict)."""
    from gpu_magics.cluster.info import ClusterFacts

    facts = ClusterFacts.from_json(value)
    return None if facts is None else facts.to_json()


def _parked(value: Any) -> dict[str, Any] | None:
    """A park as written (``since``, ``bytes``, ``workers``), ``None`` where not parked (or not a dict)."""
    if not isinstance(value, dict):
        return None
    return {"since": float(value["since"]), "bytes": int(value["bytes"]), "workers": int(value["workers"])}


def _number(value: Any) -> float | None:
    return None if value is None else float(value)


def _bounds(value: Any) -> tuple[int, int] | None:
    if value is None:
        return None
    minimum, maximum = value
    return int(minimum), int(maximum)


@dataclass(frozen=True)
class KernelRecord:
    """What a kernel holds on its GPUs, as it says itself: per GPU, all of it (``process_memory``) and of that the
    memory in use by arrays, cached by its pool and taken by its CUDA context (types.ts IKernelGpu)."""

    gpus: tuple[dict[str, Any], ...] = ()
    pid: int = field(default_factory=os.getpid)
    kernel_id: str | None = None  # as ClusterRecord's
    time: float = field(default_factory=_now)  # when the figures were read
    started_at: float = field(default_factory=_now)  # when the kernel first wrote one (its pid's age)
    connection_file: str | None = None
    host: str | None = None
    memory_cap: str | None = None  # the notebook's own cap on each GPU (``%gpumemory --cap``: "8589934592", "25%")

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["gpus"] = [dict(gpu) for gpu in self.gpus]
        data["version"] = KERNEL_SCHEMA_VERSION
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> KernelRecord:
        """The inverse of ``to_json``; ``KeyError``, ``TypeError`` or ``ValueError`` when malformed."""
        kernel_id, connection_file = origin(data, KERNEL_SCHEMA_VERSION)
        return cls(
            gpus=tuple(dict(gpu) for gpu in data.get("gpus") or () if isinstance(gpu, dict)),
            pid=int(data["pid"]),
            kernel_id=kernel_id,
            time=float(data["time"]),
            started_at=float(data["started_at"]),
            connection_file=connection_file,
            host=_text(data.get("host")),
            memory_cap=_text(data.get("memory_cap")),
        )

    @property
    def filename(self) -> str:
        return f"{KERNEL_PREFIX}{self.pid}.json"


def write_record(record: ClusterRecord | KernelRecord, *, durable: bool = True) -> Path:
    """Write (or replace) ``record`` atomically, readable by its owner only; returns its path. ``durable``
    waits for the disk (fsync) too; refreshes of a record that exists skip that wait."""
    directory = runtime_dir()
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    path = directory / record.filename
    temporary = directory / f".{record.filename}.{os.getpid()}.{time.monotonic_ns()}.tmp"
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(descriptor, "w", encoding="utf-8") as file:
            json.dump(record.to_json(), file, indent=1)
            file.flush()
            if durable:
                os.fsync(file.fileno())
        os.replace(temporary, path)
    finally:  # replaced, it is gone already; after a failure (re-raised) only the temporary file goes
        with contextlib.suppress(OSError):
            temporary.unlink(missing_ok=True)
    return path


def remove_record(path: Path | None) -> None:
    """Remove a record file; a missing one is fine."""
    if path is not None:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()


def list_records(*, clean: bool = True) -> list[ClusterRecord]:
    """Every cluster record whose process still runs, oldest first; ``clean`` removes stale or unreadable ones."""
    return sorted(_list(PREFIX, ClusterRecord.from_json, clean), key=lambda record: record.started_at)


def list_kernel_records(*, clean: bool = True) -> list[KernelRecord]:
    """Every kernel's own report whose process still runs; ``clean`` removes stale or unreadable ones."""
    return _list(KERNEL_PREFIX, KernelRecord.from_json, clean)


def _list(prefix: str, parse: Any, clean: bool) -> list[Any]:
    directory = runtime_dir()
    if not directory.is_dir():
        return []
    records = []
    for path in sorted(directory.glob(f"{prefix}*.json")):
        try:
            record = parse(json.loads(path.read_text(encoding="utf-8")))
        except FileNotFoundError:
            continue
        except (OSError, ValueError, KeyError, TypeError, AttributeError, RecursionError):  # not a record
            if clean:
                remove_record(path)
            continue
        if _alive(record):
            records.append(record)
        elif clean:
            remove_record(path)
    return records


def _alive(record: ClusterRecord | KernelRecord) -> bool:
    """Whether the process that wrote ``record`` still runs (and is not a later one with the same pid)."""
    import psutil

    try:
        process = psutil.Process(record.pid)
        if process.status() == psutil.STATUS_ZOMBIE:
            return False
        created = process.create_time()
    except psutil.NoSuchProcess:
        return False
    except psutil.Error:
        return True  # exists, but we may not look at it
    return created <= record.started_at + 1.0
