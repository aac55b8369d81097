"""Pure parsing of the ``%gpucluster`` line into a frozen ``ClusterOptions``; every mistake is a one-line
``LineError``. Nothing here looks at the machine: checks against the visible GPUs live in ``managers.local``."""

from __future__ import annotations

import argparse
import re
from dataclasses import dataclass, field, fields
from typing import Any, Literal

from gpu_magics.text.argparsing import (
    FreeGpus,
    MagicArgumentParser,
    duration,
    gateway_address,
    gateway_cluster_name,
    gateway_option,
    identifier,
    job_option,
    memory_size,
    name_word,
    non_negative_float,
    one_word,
    parse_address,
    parse_gpus,
    parse_size,
    positive_int,
    timeout_seconds,
    variable_name,
    walltime,
)
from gpu_magics.text.errors import LineError

PROG = "%gpucluster"
Action = Literal["start", "status", "stop", "restart", "scale", "adapt", "dashboard", "free", "park", "resume"]
ACTIONS: tuple[Action, ...] = (
    "start",
    "status",
    "stop",
    "restart",
    "scale",
    "adapt",
    "dashboard",
    "free",
    "park",
    "resume",
)
# gpu, cpu: started here (LocalCUDACluster, LocalCluster); attached: --address; slurm: --slurm (dask-jobqueue's
# SLURMCluster, started here); adopted: --from NAME (a cluster manager the user made); gateway: --gateway (a
# cluster from a Dask Gateway, made here or connected to by name)
Kind = Literal["gpu", "cpu", "attached", "slurm", "adopted", "gateway"]
GpuDirective = Literal["gres", "gpus"]
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
DEFAULT_WAIT = 60.0  # --slurm, --from: seconds to wait for the workers before returning with the jobs' states


@dataclass(frozen=True)
class LocalOptions:
    """What only a cluster of GPU workers started here reads (``--gpus``, dask-cuda's memory settings)."""

    gpus: tuple[int, ...] | None = None  # None: every visible GPU (or the free ones, with free_gpus)
    free_gpus: int | None = None  # --gpus free (0: every free GPU) or free:N (the N freest)
    device_memory_limit: int | float | None = None  # bytes, or a fraction of the device's memory
    rmm_pool_size: int | float | None = None


@dataclass(frozen=True)
class SlurmOptions:
    """What only ``--slurm`` reads: the jobs to submit."""

    jobs: int | None = None  # how many jobs (default 1)
    gpus_per_job: int | None = None  # GPUs per job, one dask-cuda worker each
    gpu_directive: GpuDirective = "gres"  # how a job asks for its GPUs: --gres=gpu:G or --gpus=G
    partition: str | None = None
    account: str | None = None
    walltime: str | None = None
    job_options: tuple[str, ...] = ()  # further #SBATCH directives
    memory: str | None = None  # host memory per job (default: the config's, else per worker)
    interface: str | None = None  # network interface the scheduler and workers use (ib0, eth0)


@dataclass(frozen=True)
class GatewayOptions:
    """What only ``--gateway [ADDRESS]`` reads: the gateway, and the cluster to make there or connect to."""

    address: str = ""  # as the line gave it; "" takes the address from dask-gateway's config
    cluster_options: tuple[tuple[str, str], ...] = ()  # --gateway-option KEY=VALUE: the gateway's cluster options
    workers: int | None = None  # how many workers to ask for (default 1)
    list_clusters: bool = False  # --list: the user's clusters on the gateway
    connect_name: str | None = None  # --connect NAME: a running gateway cluster


# the options of each group, as the line names them (``given``); each belongs to a start
_GPU_ONLY = ("gpus", "device_memory_limit", "rmm_pool_size")
_SLURM_ONLY = tuple(field.name for field in fields(SlurmOptions))
_GATEWAY_ONLY = ("gateway_options", "workers", "list_clusters", "connect_name")
_START_ONLY: tuple[str, ...] = ("cpu_workers", "address", "threads_per_worker", "protocol", "dashboard", "name")
_START_ONLY += ("host", "replace", "timeout", "idle_timeout", "slurm", "from_name", "wait", "gateway", *_GPU_ONLY)
_START_ONLY += (*_SLURM_ONLY, *_GATEWAY_ONLY)


@dataclass(frozen=True)
class ClusterOptions:
    """What one ``%gpucluster`` line asks for: what the control and every manager read at the top, what one manager
    reads in its group (``local``; ``slurm`` and ``gateway``, ``None`` unless the line chose that manager)."""

    action: Action = "start"
    scale_to: int | None = None
    adapt_range: tuple[int, int] | None = None  # adapt MIN MAX
    free_target: FreeTarget = "all"  # %gpucluster free [kernel|workers]
    close: bool = False  # stop --close: close an adopted cluster rather than detach
    keep: bool = False  # stop --keep: leave a gateway cluster made here running (it outlives the kernel)
    name: str | None = None
    client_name: str | None = None
    replace: bool = False
    timeout: float | None = None
    wait: float | None = None  # seconds to wait for the workers (--slurm, --from, --gateway); None: DEFAULT_WAIT
    idle_timeout: float | None = None  # seconds without a task before it closes; 0: never; None: the config's
    host: str = "127.0.0.1"
    protocol: Literal["tcp", "ucx", "ucxx"] = "tcp"  # ucx and ucxx: one choice, UCX through distributed-ucxx
    dashboard: bool = True
    threads_per_worker: int | None = None  # None: GPU_WORKER_THREADS or CPU_WORKER_THREADS
    cpu_workers: int | None = None  # CPU workers started here, or per SLURM job
    address: str | None = None  # --address: attach to the scheduler there
    from_name: str | None = None  # --from NAME: adopt the cluster manager in the user's namespace
    local: LocalOptions = LocalOptions()
    slurm: SlurmOptions | None = None  # --slurm: workers from SLURM jobs (dask-jobqueue)
    gateway: GatewayOptions | None = None  # --gateway: a cluster from a Dask Gateway
    given: frozenset[str] = field(default_factory=frozenset)  # the options the line named (flat: gpus, jobs, ...)

    @property
    def kind(self) -> Kind:
        """The kind of cluster a start would give: attached, adopted, SLURM jobs, CPU or GPU workers."""
        if self.address is not None:
            return "attached"
        if self.from_name is not None:
            return "adopted"
        if self.gateway is not None:
            return "gateway"
        if self.slurm is not None:
            return "slurm"
        return "cpu" if self.cpu_workers is not None else "gpu"

    @property
    def start_wait(self) -> float:
        """--slurm, --from, --gateway: seconds to wait for the workers before saying which jobs still wait."""
        return DEFAULT_WAIT if self.wait is None else self.wait

    def worker_threads(self, gpu: bool) -> int:
        """Threads per worker: the line's, else the tuned default for GPU workers (``gpu``) or CPU workers (the
        manager that starts them knows which)."""
        if self.threads_per_worker is not None:
            return self.threads_per_worker
        return GPU_WORKER_THREADS if gpu else CPU_WORKER_THREADS

    @property
    def start_timeout(self) -> float:
        """Seconds to wait for a scheduler to answer (attach) or for every worker to come up (start)."""
        if self.timeout is not None:
            return self.timeout
        return DEFAULT_ATTACH_TIMEOUT if self.address is not None else DEFAULT_START_TIMEOUT

    @property
    def cluster_name(self) -> str:
        """``--name``, or the adopted variable's name, or the gateway cluster's (short), or the kind of cluster."""
        if self.name or self.from_name:
            return self.name or self.from_name or ""
        connect_name = self.gateway.connect_name if self.gateway is not None else None
        return gateway_short_name(connect_name) if connect_name else self.kind


_GATEWAY_NAME = re.compile(r"^(?P<namespace>[^.]+\.)?(?P<id>[0-9a-f]{32})$")


def gateway_short_name(name: str) -> str:
    """``"5b4e57c3"`` for dask-gateway's ``"5b4e57c3f8a1429b9d4a7e0c2f6b8d1e"`` (``"default.5b4e57c3"`` for
    ``"default.5b4e57c3..."`` on Kubernetes): its namespace and the first 8 of its 32 hex digits, as a short
    commit id; any other name as it is."""
    found = _GATEWAY_NAME.match(name)
    return f"{found.group('namespace') or ''}{found.group('id')[:8]}" if found else name


def _build_parser() -> MagicArgumentParser:
    parser = MagicArgumentParser(PROG, dash_values=("--job-option",))
    parser.add_argument("words", nargs="*")
    parser.add_argument("--gpus", type=parse_gpus)
    parser.add_argument("--cpu-workers", type=positive_int)
    parser.add_argument("--address", type=parse_address)
    parser.add_argument("--threads-per-worker", type=positive_int)
    parser.add_argument("--device-memory-limit", type=parse_size)
    parser.add_argument("--rmm-pool-size", type=parse_size)
    parser.add_argument("--protocol", choices=("tcp", "ucx", "ucxx"))
    parser.add_argument("--dashboard", action=argparse.BooleanOptionalAction, default=None)
    parser.add_argument("--name", type=name_word)
    parser.add_argument("--host")
    parser.add_argument("--client", type=variable_name, dest="client_name")
    parser.add_argument("--replace", action="store_true", default=None)
    parser.add_argument("--timeout", type=timeout_seconds)
    parser.add_argument("--idle-timeout", type=duration)
    parser.add_argument("--slurm", action="store_true", default=None)
    parser.add_argument("--jobs", type=positive_int)
    parser.add_argument("--gpus-per-job", type=positive_int)
    parser.add_argument("--gpu-directive", choices=("gres", "gpus"))
    parser.add_argument("--partition", type=one_word("partition"))
    parser.add_argument("--account", type=one_word("account"))
    parser.add_argument("--walltime", type=walltime)
    parser.add_argument("--job-option", action="append", dest="job_options", type=job_option)
    parser.add_argument("--memory", type=memory_size)
    parser.add_argument("--interface", type=one_word("interface"))
    parser.add_argument("--wait", type=non_negative_float)
    parser.add_argument("--from", type=identifier, dest="from_name")
    parser.add_argument("--close", action="store_true", default=None)
    parser.add_argument("--keep", action="store_true", default=None)
    parser.add_argument("--gateway", nargs="?", const="", type=gateway_address)
    parser.add_argument("--gateway-option", action="append", dest="gateway_options", type=gateway_option)
    parser.add_argument("--workers", type=positive_int)
    parser.add_argument("--list", action="store_true", default=None, dest="list_clusters")
    parser.add_argument("--connect", type=gateway_cluster_name, dest="connect_name")
    return parser.described(globals())


_PARSER = _build_parser()


def parse_cluster_line(line: str) -> ClusterOptions:
    """Parse a ``%gpucluster`` line; raises ``LineError`` with one line naming the valid choices."""
    namespace = _PARSER.parse_line(line)
    values = {key: value for key, value in vars(namespace).items() if key != "words"}
    given = frozenset(key for key, value in values.items() if value is not None)
    action, argument = _action(namespace.words)
    scale_to = argument if isinstance(argument, int) else None
    adapt_range = argument if isinstance(argument, tuple) else None
    free_target: FreeTarget = argument if isinstance(argument, str) else "all"

    if "close" in given and action != "stop":
        raise LineError(f"{PROG}: --close belongs to stop (%gpucluster stop --close closes an adopted cluster)")
    if "keep" in given and action != "stop":
        raise LineError(f"{PROG}: --keep belongs to stop (%gpucluster stop --keep leaves a gateway cluster running)")
    if "keep" in given and "close" in given:
        raise LineError(f"{PROG} stop: choose one of --close (close it) or --keep (leave it running)")
    if action != "start":
        misplaced = sorted(given & set(_START_ONLY))
        if misplaced:
            raise LineError(f"{PROG} {action}: {_belong(misplaced)} to start, not to {action}")
    _check_managers(given, namespace.gateway)
    if "cpu_workers" in given and "address" in given:
        raise LineError(f"{PROG}: choose one of --cpu-workers N (start CPU workers) or --address (attach)")
    if given & {"cpu_workers", "address", "slurm", "from_name", "gateway"}:
        wrong = sorted(given & set(_GPU_ONLY))
        if wrong:
            what = next(_flag(key) for key in _KINDS if key in given)
            hint = " (a job's GPUs: --gpus-per-job G)" if what == "--slurm" else ""
            raise LineError(f"{PROG}: {_belong(wrong)} to GPU clusters, not to {what}{hint}")
    if "address" in given and given & {"threads_per_worker", "protocol", "dashboard", "host"}:
        raise LineError(
            f"{PROG}: --address attaches to a running scheduler; it takes only --name, --client, "
            "--timeout, --idle-timeout and --replace"
        )
    if namespace.host is not None and not namespace.host.strip():
        raise LineError(f"{PROG}: --host needs an address to bind to, like 127.0.0.1 or 0.0.0.0")

    present = {key: value for key, value in values.items() if value is not None}
    present.update(local=_local(present), slurm=_slurm(present), gateway=_gateway(present))  # each takes its own
    present.update(action=action, scale_to=scale_to, adapt_range=adapt_range, free_target=free_target, given=given)
    return ClusterOptions(**present)


def _local(present: dict[str, Any]) -> LocalOptions:
    """The GPU cluster's options, taken out of ``present`` (the line's values by option)."""
    local = {key: present.pop(key) for key in _GPU_ONLY if key in present}
    if isinstance(local.get("gpus"), FreeGpus):
        local["free_gpus"] = local.pop("gpus").count
    return LocalOptions(**local)


def _slurm(present: dict[str, Any]) -> SlurmOptions | None:
    """``--slurm``'s options, taken out of ``present``; ``None`` without ``--slurm``."""
    job = {key: present.pop(key) for key in _SLURM_ONLY if key in present}
    if not present.pop("slurm", False):
        return None
    if "job_options" in job:
        job["job_options"] = tuple(job["job_options"])
    return SlurmOptions(**job)


def _gateway(present: dict[str, Any]) -> GatewayOptions | None:
    """``--gateway``'s options, taken out of ``present``; ``None`` without ``--gateway``."""
    found = {key: present.pop(key) for key in _GATEWAY_ONLY if key in present}
    address = present.pop("gateway", None)
    if address is None:
        return None
    if "gateway_options" in found:
        found["cluster_options"] = tuple(found.pop("gateway_options"))
    return GatewayOptions(address=address, **found)


_KINDS = ("slurm", "from_name", "gateway", "address", "cpu_workers")
_FLAGS = {
    "from_name": "--from",
    "job_options": "--job-option",
    "client_name": "--client",
    "gateway_options": "--gateway-option",
    "list_clusters": "--list",
    "connect_name": "--connect",
}


def _flag(key: str) -> str:
    """The option a ``ClusterOptions`` field comes from."""
    return _FLAGS.get(key, "--" + key.replace("_", "-"))


def _belong(keys: list[str]) -> str:
    """``"--list belongs"``, ``"--jobs, --partition belong"``: the options of ``keys`` and the verb that agrees."""
    return ", ".join(_flag(key) for key in keys) + (" belongs" if len(keys) == 1 else " belong")


def _check_managers(given: frozenset[str], address: str | None = None) -> None:
    """--slurm, --from and --gateway: what goes with what, each mistake one line."""
    chosen = [key for key in ("slurm", "from_name", "gateway", "address") if key in given]
    if len(chosen) > 1:
        raise LineError(
            f"{PROG}: choose one of --slurm (SLURM jobs), --from NAME (adopt), --gateway (a Dask Gateway) or "
            "--address (attach)"
        )
    _check_gateway(given, address)
    slurm_only = sorted(given & set(_SLURM_ONLY))
    if slurm_only and "slurm" not in given:
        raise LineError(f"{PROG}: {_belong(slurm_only)} to --slurm (workers from SLURM jobs)")
    if "gpus_per_job" in given and "cpu_workers" in given:
        raise LineError(f"{PROG} --slurm: choose one of --gpus-per-job G (GPU workers) or --cpu-workers K per job")
    if "gpu_directive" in given and "gpus_per_job" not in given:
        raise LineError(f"{PROG} --slurm: --gpu-directive goes with --gpus-per-job G")
    if "wait" in given and not given & {"slurm", "from_name", "gateway"}:
        raise LineError(
            f"{PROG}: --wait belongs to --slurm, --from and --gateway (clusters whose workers may come late)"
        )
    if "from_name" in given:
        wrong = sorted(given & {"cpu_workers", "threads_per_worker", "protocol", "dashboard", "host", "timeout"})
        if wrong:
            raise LineError(
                f"{PROG} --from: {_belong(wrong)} to clusters started here; the adopted cluster keeps its own "
                "settings (--from takes --name, --client, --wait, --idle-timeout and --replace)"
            )


def _check_gateway(given: frozenset[str], address: str | None) -> None:
    """--gateway (``address``: as typed, "" when not) and its options: what goes with what, each mistake one line."""
    gateway_only = sorted(given & set(_GATEWAY_ONLY))
    if gateway_only and "gateway" not in given:
        raise LineError(f"{PROG}: {_belong(gateway_only)} to --gateway (a cluster from a Dask Gateway)")
    if "gateway" not in given:
        return
    wrong = sorted(given & {"cpu_workers", "threads_per_worker", "protocol", "dashboard", "host"})
    if wrong:
        listing = " ".join(part for part in (f"{PROG} --gateway", address, "--list") if part)
        raise LineError(
            f"{PROG} --gateway: {_belong(wrong)} to clusters started here; the gateway sets up its workers from its "
            f"own options: give them as --gateway-option KEY=VALUE ({listing} lists the options it offers)"
        )
    if "list_clusters" in given:
        extra = sorted(given - {"gateway", "list_clusters", "timeout"})
        if extra:
            goes = "goes" if len(extra) == 1 else "go"
            flags = ", ".join(_flag(key) for key in extra)
            raise LineError(f"{PROG} --gateway --list: only lists; {flags} {goes} with a start")
    if "connect_name" in given and "gateway_options" in given:
        raise LineError(
            f"{PROG} --gateway --connect: the cluster keeps the options it was made with; leave --gateway-option out"
        )


def _action(words: list[str]) -> tuple[Action, int | tuple[int, int] | FreeTarget | None]:
    choices = "start, status, stop, restart, scale N, dashboard, free, adapt MIN MAX, park, resume"
    if not words:
        return "start", None
    word = words[0].lower()
    if word not in ACTIONS:
        raise LineError(f"{PROG}: unknown action {words[0]!r}; choose one of {choices}")
    if word == "scale":
        if len(words) != 2:
            raise LineError(f"{PROG} scale: give the number of workers, like: {PROG} scale 2")
        try:
            count = int(words[1])
        except ValueError:
            raise LineError(f"{PROG} scale: expected a whole number of workers, got {words[1]!r}") from None
        if count < 1:
            raise LineError(f"{PROG} scale: expected at least 1 worker, got {count}")
        return "scale", count
    if word == "adapt":
        return "adapt", _adapt_range(words[1:])
    if word == "free" and len(words) == 2:
        target = words[1].lower()
        if target not in FREE_TARGETS:
            raise LineError(f"{PROG} free: choose kernel, workers or all (the default), not {words[1]!r}")
        return "free", target
    if len(words) > 1:
        raise LineError(f"{PROG} {word}: unexpected {' '.join(words[1:])!r}")
    return word, None


def _adapt_range(words: list[str]) -> tuple[int, int]:
    """``adapt MIN MAX``: at least MIN and at most MAX workers."""
    if len(words) != 2 or not all(word.isdigit() for word in words):
        raise LineError(f"{PROG} adapt: give the least and most workers, like: {PROG} adapt 0 8")
    minimum, maximum = int(words[0]), int(words[1])
    if maximum < 1 or minimum > maximum:
        raise LineError(f"{PROG} adapt: expected MIN <= MAX and MAX at least 1, got {minimum} {maximum}")
    return minimum, maximum
