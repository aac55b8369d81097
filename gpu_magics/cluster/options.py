"""Pure parsing of the ``%gpucluster`` line into a frozen ``ClusterOptions``; every mistake is a one-line
``UsageError``. Nothing here looks at the machine: checks against the visible GPUs live in ``lifecycle``."""

from __future__ import annotations

import argparse
import keyword
import re
from dataclasses import dataclass, field
from typing import Literal

from IPython.core.error import UsageError

from gpu_magics.argparsing import MagicArgumentParser, comma_list, duration, positive_float, positive_int

PROG = "%gpucluster"
Action = Literal["start", "status", "stop", "restart", "scale", "dashboard", "free"]
ACTIONS: tuple[Action, ...] = ("start", "status", "stop", "restart", "scale", "dashboard", "free")
Kind = Literal["gpu", "cpu", "attached"]
FreeTarget = Literal["all", "kernel", "workers"]
FREE_TARGETS: tuple[FreeTarget, ...] = ("all", "kernel", "workers")

# Measured with LocalCUDACluster on 4x H200, seed workload (80 GB in 800 MB cupy chunks): 4 threads per GPU
# worker ran it in 0.29 s against 0.37 s with dask-cuda's default of 1. A worker with one thread leaves its
# GPU idle while Python schedules, launches and hands over the next chunk; more threads overlap that host work
# with the device's.
GPU_WORKER_THREADS = 4
CPU_WORKER_THREADS = 1
DEFAULT_ATTACH_TIMEOUT = 5.0
DEFAULT_START_TIMEOUT = 120.0

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
_ADDRESS = re.compile(r"^(?P<scheme>[a-z]+)://(?P<host>\[[0-9a-fA-F:]+\]|[^\s:/\[\]]+):(?P<port>\d{1,5})/?$")
_SCHEMES = ("tcp", "tls", "ucx", "ucxx", "ws", "wss")
_START_ONLY = (
    "gpus",
    "cpu_workers",
    "address",
    "threads_per_worker",
    "device_memory_limit",
    "rmm_pool_size",
    "protocol",
    "dashboard",
    "name",
    "host",
    "replace",
    "timeout",
    "idle_timeout",
)
_GPU_ONLY = ("gpus", "device_memory_limit", "rmm_pool_size")


@dataclass(frozen=True)
class ClusterOptions:
    """What one ``%gpucluster`` line asks for."""

    action: Action = "start"
    scale_to: int | None = None
    gpus: tuple[int, ...] | None = None  # None: every visible GPU (or the free ones, with free_gpus)
    free_gpus: int | None = None  # --gpus free (0: every free GPU) or free:N (the N freest)
    free_target: FreeTarget = "all"  # %gpucluster free [kernel|workers]
    idle_timeout: float | None = None  # seconds without a task before it closes; 0: never; None: the config's
    cpu_workers: int | None = None
    address: str | None = None
    threads_per_worker: int | None = None  # None: GPU_WORKER_THREADS or CPU_WORKER_THREADS
    device_memory_limit: int | float | None = None  # bytes, or a fraction of the device's memory
    rmm_pool_size: int | float | None = None
    protocol: Literal["tcp", "ucx", "ucxx"] = "tcp"  # ucx and ucxx: one choice, UCX through distributed-ucxx
    dashboard: bool = True
    name: str | None = None
    host: str = "127.0.0.1"
    client_name: str | None = None
    replace: bool = False
    timeout: float | None = None
    given: frozenset[str] = field(default_factory=frozenset)  # the options the line named

    @property
    def kind(self) -> Kind:
        """The kind of cluster a start would give: attached, CPU workers or GPU workers."""
        if self.address is not None:
            return "attached"
        return "cpu" if self.cpu_workers is not None else "gpu"

    @property
    def threads(self) -> int:
        """Threads per worker, with the tuned default for the kind."""
        if self.threads_per_worker is not None:
            return self.threads_per_worker
        return GPU_WORKER_THREADS if self.kind == "gpu" else CPU_WORKER_THREADS

    @property
    def start_timeout(self) -> float:
        """Seconds to wait for a scheduler to answer (attach) or for every worker to come up (start)."""
        if self.timeout is not None:
            return self.timeout
        return DEFAULT_ATTACH_TIMEOUT if self.kind == "attached" else DEFAULT_START_TIMEOUT

    @property
    def cluster_name(self) -> str:
        """``--name``, or the kind of cluster."""
        return self.name or self.kind


def parse_size(text: str) -> int | float:
    """Bytes with a unit (``"10GB"``, ``"512MiB"``) or a share of each device's memory (``"0.8"``)."""
    from dask.utils import parse_bytes

    try:
        value = float(text)
    except ValueError:
        value = None
    if value is not None:
        if 0 < value <= 1:
            return value
        raise argparse.ArgumentTypeError(
            f"invalid size {text!r}: a number without a unit is a share of each GPU's memory, from 0 to 1 "
            "(like 0.8); or give a size with a unit, like 10GB"
        )
    try:
        size = int(parse_bytes(text))
    except (ValueError, TypeError):
        raise argparse.ArgumentTypeError(f"invalid size {text!r}: use a unit, like 10GB or 512MiB") from None
    if size < 2**20:
        raise argparse.ArgumentTypeError(f"invalid size {text!r}: under 1 MiB; use a unit, like 10GB or 512MiB")
    return size


@dataclass(frozen=True)
class FreeGpus:
    """``--gpus free`` (``count`` 0: every free GPU) or ``--gpus free:N`` (the N freest)."""

    count: int = 0


def parse_gpus(text: str) -> tuple[int, ...] | FreeGpus | None:
    """``"all"`` (``None``), ``"free"`` or ``"free:N"`` (``FreeGpus``), or a comma list of distinct GPU indices
    such as ``"0,2,3"``."""
    if text.strip().lower() == "all":
        return None
    word, colon, count = text.strip().lower().partition(":")
    if word == "free":
        if not colon:
            return FreeGpus()
        if not count.isdigit() or int(count) < 1:
            raise argparse.ArgumentTypeError(f"invalid GPU choice {text!r}: use free, or free:N with N at least 1")
        return FreeGpus(int(count))
    parts = comma_list(text, "GPU indices")
    if any(not part.isdigit() for part in parts):
        raise argparse.ArgumentTypeError(f"invalid GPU list {text!r}: use all, free, free:N or indices like 0,2,3")
    indices = tuple(int(part) for part in parts)
    if len(set(indices)) != len(indices):
        raise argparse.ArgumentTypeError(f"invalid GPU list {text!r}: an index is named twice")
    return indices


def parse_address(text: str) -> str:
    """A scheduler address; ``host:port`` means ``tcp://host:port``."""
    address = text if "://" in text else f"tcp://{text}"
    match = _ADDRESS.match(address)
    if match is None or match.group("scheme") not in _SCHEMES or not 0 < int(match.group("port")) < 65536:
        raise argparse.ArgumentTypeError(f"invalid scheduler address {text!r}: use host:port, e.g. 10.0.0.5:8786")
    return address.rstrip("/")


def _name(text: str) -> str:
    if not _NAME.match(text):
        raise argparse.ArgumentTypeError(f"invalid name {text!r}: use letters, digits, '.', '_' or '-'")
    return text


def _identifier(text: str) -> str:
    if not text.isidentifier() or keyword.iskeyword(text):
        raise argparse.ArgumentTypeError(f"invalid variable name {text!r}")
    return text


def _build_parser() -> MagicArgumentParser:
    parser = MagicArgumentParser(PROG)
    parser.add_argument("words", nargs="*")
    parser.add_argument("--gpus", type=parse_gpus)
    parser.add_argument("--cpu-workers", type=positive_int)
    parser.add_argument("--address", type=parse_address)
    parser.add_argument("--threads-per-worker", type=positive_int)
    parser.add_argument("--device-memory-limit", type=parse_size)
    parser.add_argument("--rmm-pool-size", type=parse_size)
    parser.add_argument("--protocol", choices=("tcp", "ucx", "ucxx"))
    parser.add_argument("--dashboard", action=argparse.BooleanOptionalAction, default=None)
    parser.add_argument("--name", type=_name)
    parser.add_argument("--host")
    parser.add_argument("--client", type=_identifier, dest="client_name")
    parser.add_argument("--replace", action="store_true", default=None)
    parser.add_argument("--timeout", type=positive_float)
    parser.add_argument("--idle-timeout", type=duration)
    return parser


_PARSER = _build_parser()


def parse_cluster_line(line: str) -> ClusterOptions:
    """Parse a ``%gpucluster`` line; raises ``UsageError`` with one line naming the valid choices."""
    namespace = _PARSER.parse_line(line)
    values = {key: value for key, value in vars(namespace).items() if key != "words"}
    given = frozenset(key for key, value in values.items() if value is not None)
    action, argument = _action(namespace.words)
    scale_to = argument if isinstance(argument, int) else None
    free_target: FreeTarget = argument if isinstance(argument, str) else "all"

    if action != "start":
        misplaced = sorted(given & set(_START_ONLY))
        if misplaced:
            flags = ", ".join("--" + key.replace("_", "-") for key in misplaced)
            raise UsageError(f"{PROG} {action}: {flags} belong to start, not to {action}")
    if "cpu_workers" in given and "address" in given:
        raise UsageError(f"{PROG}: choose one of --cpu-workers N (start CPU workers) or --address (attach)")
    if "cpu_workers" in given or "address" in given:
        wrong = sorted(given & set(_GPU_ONLY))
        if wrong:
            flags = ", ".join("--" + key.replace("_", "-") for key in wrong)
            what = "--cpu-workers" if "cpu_workers" in given else "--address"
            raise UsageError(f"{PROG}: {flags} belong to GPU clusters, not to {what}")
    if "address" in given and given & {"threads_per_worker", "protocol", "dashboard", "host"}:
        raise UsageError(
            f"{PROG}: --address attaches to a running scheduler; it takes only --name, --client, "
            "--timeout, --idle-timeout and --replace"
        )
    if namespace.host is not None and not namespace.host.strip():
        raise UsageError(f"{PROG}: --host needs an address to bind to, like 127.0.0.1 or 0.0.0.0")

    present = {key: value for key, value in values.items() if value is not None}
    if isinstance(present.get("gpus"), FreeGpus):
        present["free_gpus"] = present.pop("gpus").count
    return ClusterOptions(action=action, scale_to=scale_to, free_target=free_target, given=given, **present)


def _action(words: list[str]) -> tuple[Action, int | FreeTarget | None]:
    choices = "start, status, stop, restart, scale N, dashboard, free"
    if not words:
        return "start", None
    word = words[0].lower()
    if word not in ACTIONS:
        raise UsageError(f"{PROG}: unknown action {words[0]!r}; choose one of {choices}")
    if word == "scale":
        if len(words) != 2:
            raise UsageError(f"{PROG} scale: give the number of workers, like: {PROG} scale 2")
        try:
            count = int(words[1])
        except ValueError:
            raise UsageError(f"{PROG} scale: expected a whole number of workers, got {words[1]!r}") from None
        if count < 1:
            raise UsageError(f"{PROG} scale: expected at least 1 worker, got {count}")
        return "scale", count
    if word == "free" and len(words) == 2:
        target = words[1].lower()
        if target not in FREE_TARGETS:
            raise UsageError(f"{PROG} free: choose kernel, workers or all (the default), not {words[1]!r}")
        return "free", target
    if len(words) > 1:
        raise UsageError(f"{PROG} {word}: unexpected {' '.join(words[1:])!r}")
    return word, None
