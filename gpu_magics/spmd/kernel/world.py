"""The world of ranks: which worker is which rank, the environment each rank gets, and the checks that keep two
ranks off one GPU. Plain data and pure functions (what the workers said about themselves comes in, frozen ranks
and environments go out), tested without a cluster.

Ranks are ordered by host, then GPU (its index on the host), then worker name: rank 0 is the first host's first
GPU. ``LOCAL_RANK`` counts on each host. A GPU rank's ``CUDA_VISIBLE_DEVICES`` lists the GPUs of its host's ranks
in local-rank order, so code written for torchrun (``torch.cuda.set_device(LOCAL_RANK)``, ``cuda:{LOCAL_RANK}``,
``device_ids=[LOCAL_RANK]``) lands each rank on its own GPU, where dask-cuda's rotation (the worker's own GPU
first) would put rank 2 on another rank's GPU. A CPU rank sees no GPU.
"""

from __future__ import annotations

import ast
import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from gpu_magics.spmd.messages import Probe
from gpu_magics.text.errors import CellError, ClusterError, LineError

PROG = "%%gpurun spmd"
USER_SET = (  # passed on where the kernel has them (``%env``): the user's choice wins over the ranks' defaults
    "XLA_PYTHON_CLIENT_PREALLOCATE",
    "XLA_PYTHON_CLIENT_MEM_FRACTION",
    "TORCH_FR_BUFFER_SIZE",
    "TORCH_NCCL_TRACE_BUFFER_SIZE",
    "TORCH_NCCL_ASYNC_ERROR_HANDLING",
)


@dataclass(frozen=True)
class Member:
    """One worker, as it described itself (``spmd.worker.host.probe``)."""

    address: str
    name: str
    host: str
    gpu_uuid: str | None = None  # None: a CPU worker (or one whose GPU cannot be read)
    gpu_cuda_id: str | None = None
    gpu_name: str | None = None
    has_torch: bool = False
    has_jax: bool = False

    @classmethod
    def from_probe(cls, address: str, probe: Probe, *, gpu: bool) -> Member:
        found = probe.get("gpu") if gpu else None
        return cls(
            address=address,
            name=str(probe.get("name", address)),
            host=str(probe.get("host", "")),
            gpu_uuid=None if not found else str(found.get("uuid") or found.get("cuda_id")),
            gpu_cuda_id=None if not found else str(found.get("cuda_id") or found.get("uuid")),
            gpu_name=None if not found else str(found.get("name", "")),
            has_torch=bool(probe.get("has_torch")),
            has_jax=bool(probe.get("has_jax")),
        )


@dataclass(frozen=True)
class Rank:
    rank: int
    local_rank: int
    node_rank: int
    local_world_size: int
    member: Member

    @property
    def gpu(self) -> bool:
        return self.member.gpu_uuid is not None

    @property
    def label(self) -> str:
        """``"127.0.0.2 · GPU 1"`` or ``"127.0.0.2 · CPU"``."""
        where = f"GPU {self.member.gpu_cuda_id}" if self.gpu else "CPU"
        return f"{self.member.host} · {where}"


@dataclass(frozen=True)
class World:
    ranks: tuple[Rank, ...]
    master_port: int = 0
    jax_port: int = 0
    user_env: tuple[tuple[str, str], ...] = ()  # the kernel's values of ``USER_SET``: the user's choice wins
    run_id: str = "gpu-magics"  # ``TORCHELASTIC_RUN_ID``: one per world, as torchrun's rendezvous id

    @property
    def size(self) -> int:
        return len(self.ranks)

    @property
    def master_addr(self) -> str:
        return self.ranks[0].member.host

    @property
    def addresses(self) -> frozenset[str]:
        return frozenset(rank.member.address for rank in self.ranks)

    @property
    def kind(self) -> str:
        """``gpu`` (every rank has a GPU), ``cpu`` (none has) or ``mixed``."""
        with_gpu = sum(rank.gpu for rank in self.ranks)
        return "gpu" if with_gpu == self.size else "cpu" if with_gpu == 0 else "mixed"

    def describe(self) -> str:
        """``"4 ranks on 2 hosts (4 GPUs)"``."""
        hosts = len({rank.member.host for rank in self.ranks})
        gpus = sum(rank.gpu for rank in self.ranks)
        devices = f"{gpus} GPU{'s' * (gpus != 1)}" if gpus else "CPU"
        if gpus and gpus != self.size:
            devices += f", {self.size - gpus} CPU"
        return f"{self.size} rank{'s' * (self.size != 1)} on {hosts} host{'s' * (hosts != 1)} ({devices})"

    def env(self, rank: Rank) -> dict[str, str]:
        """The environment of ``rank``'s process: torchrun's variables, JAX's, and its GPUs.

        torchrun's are every one its agent gives a worker (``local_elastic_agent._start_workers``, with the error
        file and the signals its launcher sets), as a one-node-per-host run of one role that was never restarted;
        ``TORCHELASTIC_RUN_ID`` is what libraries read as "launched by torchrun" (Lightning then leaves
        ``WORLD_SIZE`` and the others alone), and no agent store is hosted (``TORCHELASTIC_USE_AGENT_STORE`` is
        ``False``: ``init_process_group`` makes its own at ``MASTER_ADDR:MASTER_PORT``). The error file is empty,
        as torchrun's where it keeps no logs: a ``@record``-ed failure is printed, which the rank's row shows.
        ``TORCH_NCCL_ASYNC_ERROR_HANDLING`` and ``OMP_NUM_THREADS`` come from ``rank_env.torchrun_defaults`` on
        the worker, where torchrun reads its own environment for them."""
        host_gpus = [
            other.member.gpu_uuid or "" for other in self.ranks if other.member.host == rank.member.host and other.gpu
        ]
        coordinator = f"{_url_host(self.master_addr)}:{self.jax_port}"
        hosts = len({other.member.host for other in self.ranks})
        return {
            "RANK": str(rank.rank),
            "LOCAL_RANK": str(rank.local_rank),
            "WORLD_SIZE": str(self.size),
            "LOCAL_WORLD_SIZE": str(rank.local_world_size),
            "NODE_RANK": str(rank.node_rank),
            "GROUP_RANK": str(rank.node_rank),
            "GROUP_WORLD_SIZE": str(hosts),
            "ROLE_NAME": "default",
            "ROLE_RANK": str(rank.rank),
            "ROLE_WORLD_SIZE": str(self.size),
            "MASTER_ADDR": self.master_addr,
            "MASTER_PORT": str(self.master_port),
            "TORCHELASTIC_RUN_ID": self.run_id,
            "TORCHELASTIC_RESTART_COUNT": "0",
            "TORCHELASTIC_MAX_RESTARTS": "0",
            "TORCHELASTIC_USE_AGENT_STORE": "False",
            "TORCHELASTIC_ERROR_FILE": "",
            "TORCHELASTIC_SIGNALS_TO_HANDLE": "SIGTERM,SIGINT,SIGHUP,SIGQUIT",
            "JAX_COORDINATOR_ADDRESS": coordinator,
            "JAX_NUM_PROCESSES": str(self.size),
            "JAX_PROCESS_ID": str(rank.rank),
            "CUDA_VISIBLE_DEVICES": ",".join(host_gpus) if rank.gpu else "",
            "GPU_MAGICS_SPMD_DEVICE": "gpu" if rank.gpu else "cpu",
            "GPU_MAGICS_SPMD_WORKER": rank.member.address,  # where spmd.shards fetches the rank's chunks from
            **({} if rank.gpu else {"ACCELERATE_USE_CPU": "true"}),  # Accelerate's CPU ranks: gloo, as --cpu
            **dict(self.user_env),
        }

    def select(self, wanted: Sequence[int] | None, said: str = f"{PROG} --ranks") -> tuple[Rank, ...]:
        """The ranks ``wanted`` names (all without it); a one-line ``LineError`` for one outside the world, that
        begins with ``said`` (what the user wrote: ``%%gpurun spmd --ranks``, ``spmd.pull(rank=5)``)."""
        if wanted is None:
            return self.ranks
        check_ranks(wanted, self.size, said, self.describe())
        chosen = set(wanted)
        return tuple(rank for rank in self.ranks if rank.rank in chosen)


def check_source(code: str) -> None:
    """A cell that does not parse is one line here, before any rank starts."""
    try:
        ast.parse(code)
    except SyntaxError as error:
        raise CellError(f"{PROG}: the cell does not parse (line {error.lineno}: {error.msg}); nothing ran") from None


def check_ranks(wanted: Sequence[int], size: int, said: str, world: str) -> None:
    """A one-line ``LineError`` where ``wanted`` names a rank outside a world of ``size`` ranks."""
    outside = sorted({index for index in wanted if not 0 <= index < size})
    if outside:
        last = size - 1
        have = "rank 0" if last == 0 else f"ranks 0-{last}"
        raise LineError(f"{said}: no rank {', '.join(map(str, outside))}; the world has {have} ({world})")


def _host_key(host: str) -> tuple[int, Any]:
    try:
        return (0, ipaddress.ip_address(host))
    except ValueError:
        return (1, host)


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def _gpu_key(member: Member) -> tuple[int, int, str]:
    cuda_id = member.gpu_cuda_id or ""
    return (0 if cuda_id.isdigit() else 1, int(cuda_id) if cuda_id.isdigit() else 0, cuda_id)


def order(members: Sequence[Member]) -> tuple[Rank, ...]:
    """Ranks by host, then GPU, then worker name."""
    hosts = sorted({member.host for member in members}, key=_host_key)
    ranks: list[Rank] = []
    for node_rank, host in enumerate(hosts):
        here = sorted(
            (member for member in members if member.host == host),
            key=lambda member: (member.gpu_uuid is None, _gpu_key(member), member.name),
        )
        for local_rank, member in enumerate(here):
            ranks.append(Rank(len(ranks), local_rank, node_rank, len(here), member))
    return tuple(ranks)


def check_gpus(ranks: Sequence[Rank]) -> None:
    """A one-line ``LineError`` where two ranks would share a GPU."""
    seen: dict[tuple[str, str], Rank] = {}
    for rank in ranks:
        if not rank.gpu:
            continue
        key = (rank.member.host, rank.member.gpu_uuid or "")
        if key in seen:
            first = seen[key]
            raise ClusterError(
                f"{PROG}: workers {first.member.name!r} and {rank.member.name!r} share one GPU "
                f"({rank.label}), so two ranks would compute on it; give each worker its own GPU "
                "(dask-cuda's workers, or CUDA_VISIBLE_DEVICES per worker)"
            )
        seen[key] = rank


def check_group(world: World, kind: str, ranks: Sequence[Rank]) -> None:
    """A one-line ``LineError`` where ``--init kind`` cannot make its group on this world."""
    missing = [rank for rank in world.ranks if not getattr(rank.member, f"has_{kind}")]
    if missing:
        package = "torch" if kind == "torch" else "'jax[cpu]' (or jax[cuda12])"
        names = ", ".join(str(rank.rank) for rank in missing[:8])
        raise LineError(
            f"{PROG} --init {kind}: {kind} is not installed where rank{'s' * (len(missing) != 1)} {names} "
            f"run{'s' * (len(missing) == 1)}; pip install {package} in the workers' environment"
        )
    if world.kind == "mixed":
        cpu = next(rank for rank in world.ranks if not rank.gpu)
        raise ClusterError(
            f"{PROG} --init {kind}: rank {cpu.rank} ({cpu.member.name!r}) has no GPU, and a GPU group needs one on "
            "every rank; use a cluster of GPU workers only (or CPU workers only, for a gloo group)"
        )
