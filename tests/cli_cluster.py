"""A Dask cluster started with Dask's own CLI in separate processes, as cluster managers start one.

Each worker listens on its own loopback address (127.0.0.2, 127.0.0.3, ...), standing for a host of its own,
with its own environment (``GPU_MAGICS_SOURCE`` picks the GPUs it sees). Everything runs in new process groups
and is ended by group, with every wait bounded.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

START_TIMEOUT = 60.0


@dataclass
class CliCluster:
    address: str
    scheduler: subprocess.Popen[bytes]
    workers: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)  # worker name -> process
    logs: Path | None = None

    def kill_worker(self, name: str) -> None:
        """SIGKILL one worker's whole process group, as a host going away would end it."""
        process = self.workers.pop(name)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=10)

    def add_worker(self, name: str, host: str, env: Mapping[str, str]) -> None:
        """Start one more ``dask worker`` (no nanny), as a cluster manager scaling up would."""
        assert self.logs is not None
        self.workers[name] = _spawn(
            ["distributed.cli.dask_worker", self.address, "--host", host, "--name", name, "--no-dashboard",
             "--no-nanny", "--nthreads", "1"],
            env,
            self.logs / f"worker-{name}.log",
        )  # fmt: skip

    def log_text(self) -> str:
        if self.logs is None:
            return ""
        return "\n".join(f"== {p.name}\n{p.read_text(errors='replace')[-3000:]}" for p in sorted(self.logs.iterdir()))


def _spawn(args: list[str], env: Mapping[str, str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        return subprocess.Popen(
            [sys.executable, "-m", *args],
            env={**os.environ, **env},
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )


def _end(process: subprocess.Popen[bytes]) -> None:
    for sig, wait in ((signal.SIGTERM, 5), (signal.SIGKILL, 5)):
        if process.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, sig)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=wait)


def _listening(scheduler: subprocess.Popen[bytes], scheduler_file: Path, log: Path) -> str:
    """The address the scheduler listens on, from its scheduler file (waited for while it starts)."""
    deadline = time.monotonic() + START_TIMEOUT
    while True:
        with contextlib.suppress(FileNotFoundError, ValueError, KeyError):  # not written yet, or half written
            return str(json.loads(scheduler_file.read_text())["address"])
        if scheduler.poll() is not None or time.monotonic() > deadline:
            raise AssertionError(f"the scheduler did not start; its log:\n{log.read_text()[-3000:]}")
        time.sleep(0.1)


@contextlib.contextmanager
def cli_cluster(
    workers: Mapping[str, tuple[str, Mapping[str, str]]],
    logs: Path,
    *,
    dashboard: bool = False,
    worker_args: tuple[str, ...] = ("--no-nanny", "--nthreads", "1"),
    worker_command: tuple[str, ...] = ("distributed.cli.dask_worker",),
) -> Iterator[CliCluster]:
    """``dask scheduler`` on 127.0.0.1 plus one worker per entry of ``workers`` (name -> (host to listen on,
    extra environment)), ``dask worker`` unless ``worker_command`` names another module and arguments
    (``("dask", "cuda", "worker")``); yields once every worker has registered."""
    from distributed import Client

    logs.mkdir(parents=True, exist_ok=True)
    # port 0: the scheduler (and its dashboard) listen on ports of their own choosing, which no other process can
    # take first; its scheduler file says which (written once it listens)
    dashboard_args = ["--dashboard-address", "127.0.0.1:0"] if dashboard else ["--no-dashboard"]
    scheduler_file = logs / "scheduler.json"
    scheduler_file.unlink(missing_ok=True)
    scheduler = _spawn(
        ["distributed.cli.dask_scheduler", "--host", "127.0.0.1", "--port", "0",
         "--scheduler-file", str(scheduler_file), *dashboard_args],
        {},
        logs / "scheduler.log",
    )  # fmt: skip
    cluster = CliCluster(address="", scheduler=scheduler, logs=logs)
    try:
        cluster.address = address = _listening(scheduler, scheduler_file, logs / "scheduler.log")
        for name, (host, env) in workers.items():
            cluster.workers[name] = _spawn(
                [
                    "distributed.cli.dask_worker",
                    address,
                    "--host",
                    host,
                    "--name",
                    name,
                    "--no-dashboard",
                    *worker_args,
                ],
                dict(env),
                logs / f"worker-{name}.log",
            )
        deadline = time.monotonic() + START_TIMEOUT
        with Client(address, timeout=START_TIMEOUT) as client:
            if workers:
                client.wait_for_workers(len(workers), timeout=max(1.0, deadline - time.monotonic()))
        yield cluster
    finally:
        for process in cluster.workers.values():
            _end(process)
        _end(scheduler)
