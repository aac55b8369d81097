"""Reading a cluster's state from its scheduler: workers, their GPUs and memory, addresses; as plain data."""

from __future__ import annotations

import contextlib
import http.client
import time
from collections import Counter
from collections.abc import Iterator, Mapping
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

from gpu_magics.cluster.info import WorkerGpu, WorkerInfo
from gpu_magics.text.units import dropped

if TYPE_CHECKING:
    from distributed import Client


def local_scheduler(client: Client) -> Any:
    """The ``Scheduler`` of ``client``'s cluster where it runs in this process (a cluster started here, SLURM
    jobs' scheduler), read without a round trip; ``None`` elsewhere."""
    scheduler = getattr(getattr(client, "cluster", None), "scheduler", None)
    if scheduler is None or type(scheduler).__name__ != "Scheduler" or not hasattr(scheduler, "identity"):
        return None
    return scheduler


_readings: ContextVar[dict[int, dict[str, dict[str, Any]]] | None] = ContextVar("gpu_magics_readings", default=None)


@contextlib.contextmanager
def one_reading() -> Iterator[None]:
    """Inside the block, ``scheduler_workers`` asks each client's scheduler once: a cell's plan reads the workers
    three or four ways (their count, their GPUs, the hardware line), from one answer (one round trip where the
    scheduler runs elsewhere)."""
    token = _readings.set({})
    try:
        yield
    finally:
        _readings.reset(token)


def scheduler_workers(client: Client) -> dict[str, dict[str, Any]]:
    """The scheduler's view of each worker, by address (in this process where the scheduler runs here)."""
    held = _readings.get()
    if held is not None and id(client) in held:
        return dict(held[id(client)])
    found = _scheduler_workers(client)
    if held is not None:
        held[id(client)] = found
    return dict(found)


def _scheduler_workers(client: Client) -> dict[str, dict[str, Any]]:
    scheduler = local_scheduler(client)
    if scheduler is not None and client.status == "running":
        # what scheduler_info() would fetch, the workers' part only; a worker that joins meanwhile changes the
        # dict: ask then
        try:
            return {address: worker.identity() for address, worker in scheduler.workers.items()}
        except RuntimeError:
            pass
    try:
        info = client.scheduler_info(n_workers=-1)
    except TypeError:  # distributed before n_workers existed returned every worker
        info = client.scheduler_info()
    return dict(info.get("workers", {}))


def worker_infos(
    workers: dict[str, dict[str, Any]], devices: Mapping[str, Mapping[str, Any]], *, gpu: bool
) -> tuple[WorkerInfo, ...]:
    infos = []
    for address, worker in workers.items():
        name = str(worker.get("name", address))
        seen = devices.get(name, {}) if gpu else {}
        static = (worker.get("gpu") or {}) if gpu else {}
        metrics = worker.get("metrics") or {}
        sampled = (metrics.get("gpu") or {}) if gpu else {}
        used = sampled.get("memory-used")
        infos.append(
            WorkerInfo(
                address=address,
                name=name,
                status=str(worker.get("status", "unknown")),
                threads=int(worker.get("nthreads", 0)),
                gpu_name=seen.get("gpu_name") or static.get("name"),
                gpu_device=seen.get("gpu_device"),
                gpu_memory_used=used if used is not None else seen.get("gpu_memory_used"),
                gpu_memory_total=seen.get("gpu_memory_total") or static.get("memory-total"),
                host_memory_used=metrics.get("memory"),
                host_memory_limit=worker.get("memory_limit") or None,
            )
        )
    return tuple(sorted(infos, key=lambda info: _natural(info.name)))


def _natural(name: str) -> tuple[int, int | str]:
    return (0, int(name)) if name.isdigit() else (1, name)


def hardware(
    declared: str | None,
    devices: Mapping[str, Mapping[str, Any]],
    workers: dict[str, dict[str, Any]],
    reported: Mapping[str, tuple[str, tuple[WorkerGpu, ...]]] | None = None,
    suffix: str = "",
) -> str:
    """``"4x NVIDIA H200 (4 workers)"``, ``"4x NVIDIA H200 on 2 hosts (2 workers, attached)"``,
    ``"2 CPU workers x 1 thread"``, ``"0 workers"``. ``declared``: what the manager asked the workers to be ("cpu":
    their GPUs are not looked at); ``reported``: worker address -> (host, GPUs), from the workers' own telemetry,
    which counts each GPU once; ``suffix``: the manager's note after the count (", attached")."""
    kind = declared or "unknown"
    infos = worker_infos(workers, devices, gpu=kind != "cpu")
    count = len(infos)
    plural = "s" if count != 1 else ""
    reported = {address: entry for address, entry in (reported or {}).items() if address in workers}
    if kind != "cpu" and any(gpus for _, gpus in reported.values()):
        models = Counter(gpu.name for _, gpus in reported.values() for gpu in gpus)
        hosts = {host for host, gpus in reported.values() if gpus}
        where = f" on {len(hosts)} hosts" if len(hosts) > 1 else ""
        text = " + ".join(f"{number}x {model}" for model, number in models.items())
        return f"{text}{where} ({count} worker{plural}{suffix})"
    models = Counter(info.gpu_name for info in infos if info.gpu_name)
    if models and kind != "cpu":
        gpus = " + ".join(f"{number}x {model}" for model, number in models.items())
        return f"{gpus} ({count} worker{plural}{suffix})"
    threads = sorted({info.threads for info in infos})
    per = f"{threads[0]} thread{'s' if threads[0] != 1 else ''}" if len(threads) == 1 else "mixed threads"
    text = f"{count} CPU worker{plural} x {per}" if infos else "0 workers"
    return text + (" (attached)" if suffix else "")


def dashboard_link(client: Client) -> str | None:
    """The scheduler's dashboard link, or ``None`` when it has none. The link is checked once per scheduler: one
    started without a dashboard (``--no-dashboard``, ``LocalCluster(dashboard_address=None)``) still serves HTTP
    on its dashboard port (health, metrics) and lists it, but answers 404 where the dashboard would be."""
    try:
        link = client.dashboard_link
        if link:
            info = client.scheduler_info(n_workers=0)
            if "dashboard" not in (info.get("services") or {}) or not _answers(str(info.get("id")), str(link)):
                return None
    except Exception as error:  # a link that fails any way is not shown
        dropped("reading the dashboard's link", error)
        return None
    return str(link) if link else None


_checked: dict[tuple[str, str], bool] = {}
CHECK_TIMEOUT_S = 1.0


def _answers(scheduler_id: str, link: str) -> bool:
    """Whether ``link`` does not answer 404 (checked once per scheduler; a link this kernel cannot reach counts as
    answering: the browser may reach it where the kernel does not)."""
    key = (scheduler_id, link)
    if key not in _checked:
        import urllib.error
        import urllib.request

        answers = True
        try:
            with urllib.request.urlopen(link, timeout=CHECK_TIMEOUT_S):
                pass
        except urllib.error.HTTPError as error:
            answers = error.code != 404
        except (OSError, ValueError, http.client.HTTPException):  # no answer: say the link anyway
            answers = True
        _checked[key] = answers
    return _checked[key]


def scheduler_address(client: Client) -> str:
    scheduler = client.scheduler
    assert scheduler is not None, "the client has no scheduler"
    return str(scheduler.address)


def wait_for_count(client: Client, count: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        now = len(scheduler_workers(client))
        if now == count:
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"the cluster has {now} workers after {timeout:g} s, not {count}")
        time.sleep(0.05)
