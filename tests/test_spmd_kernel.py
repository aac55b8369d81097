"""SPMD cells in a real kernel, driven as JupyterLab drives it (jupyter_client): Ctrl-C stops every rank within
seconds and the next cell works on the same workers; a killed kernel leaves no rank process and no port held,
whether its workers die with it (a cluster it started) or outlive it (a cluster from Dask's CLI)."""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from tests.cli_cluster import cli_cluster
from tests.test_kernel_faults import Kernel, loaded_kernel

pytestmark = pytest.mark.slow

HAS_TORCH = importlib.util.find_spec("torch") is not None
RANK_PIDS = (
    "import json, gpu_magics\n"
    "from gpu_magics.spmd.worker import host\n"
    "print(json.dumps(sorted(p for found in gpu_magics.client().run(host.rank_pids).values() for p in found.values())))"
)


@pytest.fixture
def kernel(tmp_path: Path) -> Iterator[Kernel]:
    with loaded_kernel(tmp_path) as started:
        yield started


def rank_pids(kernel: Kernel) -> list[int]:
    return list(json.loads(kernel.ok(RANK_PIDS).strip().splitlines()[-1]))


def gone(pids: list[int], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not any(psutil.pid_exists(pid) and psutil.Process(pid).status() != "zombie" for pid in pids):
            return True
        time.sleep(0.2)
    return False


def kill_only_the_kernel(kernel: Kernel) -> None:
    """SIGKILL the kernel's own process, not its process group (its workers and ranks are left to notice)."""
    provisioner = kernel.manager.provisioner
    assert provisioner is not None
    os.kill(provisioner.process.pid, signal.SIGKILL)  # type: ignore[attr-defined]


def port_free(port: int) -> bool:
    """Whether no rank process listens on ``port``. Once the ranks are gone the port is free for anyone: another
    test's scheduler or worker may take it at once, so only a rank holding it counts."""
    for conn in psutil.net_connections(kind="tcp"):
        if conn.status != psutil.CONN_LISTEN or not conn.laddr or conn.laddr.port != port or conn.pid is None:
            continue
        try:
            command = " ".join(psutil.Process(conn.pid).cmdline())
        except psutil.Error:
            continue
        if "gpu_magics.spmd.rank" in command:
            return False
    return True


STUCK_CELL = """%%gpurun spmd
import os, pathlib, signal, time
if os.environ["RANK"] == "1":
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # as a rank waiting in a collective's C code
print("working")
pathlib.Path(MARKS, "rank-" + os.environ["RANK"]).touch()  # Kernel.wait_for_mark
time.sleep(300)
"""


def test_ctrl_c_stops_every_rank_within_seconds_and_the_next_cell_works(kernel: Kernel) -> None:
    kernel.ok("%gpucluster --cpu-workers 2 --name spmd-interrupt", timeout=120)
    kernel.ok("%%gpurun spmd -q\nkept = 'yes'")
    workers = kernel.worker_pids()
    msg_id = kernel.start(STUCK_CELL.replace("MARKS", repr(str(kernel.runtime_dir))))
    kernel.wait_for_mark("rank-0")
    kernel.wait_for_mark("rank-1")  # both ranks are in their sleep: Ctrl-C now
    kernel.manager.interrupt_kernel()
    began = time.monotonic()
    reply, text = kernel.finish(msg_id, timeout=200)
    # within seconds (a stop's grace, then rank 1 ended), not the ranks' 300 s: a bound far from both
    assert time.monotonic() - began < 150, text
    assert reply["status"] == "error" and reply["ename"] == "KeyboardInterrupt", text
    assert "[0,1] working" in text
    assert "rank 0: stopped" in text and "rank 1: its process was ended" in text
    assert "rank 1 did not stop within 3 s and was ended: the next SPMD cell starts new ranks" in text
    assert "Task exception was never retrieved" not in text and "AllExit" not in text
    assert kernel.worker_pids() == workers  # the cluster kept its workers
    reply, text = kernel.run("%%gpurun spmd -q\nimport os\nprint('again', os.environ['RANK'], 'kept' in globals())")
    assert reply["status"] == "ok", text
    # rank 1's process had to be ended, so the world started again: new ranks everywhere, as the cell said
    assert "[0] again 0 False" in text and "[1] again 1 False" in text
    assert text.count("rank 1 was ended after the last cell: every rank starts anew (its variables are gone)") == 1


@pytest.mark.skipif(not HAS_TORCH, reason="torch is not installed (pip install torch)")
def test_a_killed_kernel_leaves_no_rank_process_and_no_port(kernel: Kernel) -> None:
    kernel.ok("%gpucluster --cpu-workers 2 --name spmd-kill", timeout=120)
    text = kernel.ok("%%gpurun spmd --init torch -q\nimport os\nprint('port', os.environ['MASTER_PORT'])", timeout=120)
    port = int(text.split("port ", 1)[1].split()[0])
    pids = rank_pids(kernel)
    assert len(pids) == 2 and not port_free(port)  # rank 0's TCP store listens on MASTER_PORT
    kill_only_the_kernel(kernel)
    assert gone(pids, 20), "rank processes outlived their kernel"
    assert port_free(port)


def test_ranks_on_workers_that_outlive_the_kernel_end_when_it_dies(kernel: Kernel, tmp_path: Path) -> None:
    workers = {"a": ("127.0.0.2", {"GPU_MAGICS_SOURCE": "fake:0"}), "b": ("127.0.0.3", {"GPU_MAGICS_SOURCE": "fake:0"})}
    with cli_cluster(workers, tmp_path / "logs") as remote:
        kernel.ok(f"%gpucluster --address {remote.address} --name outliving", timeout=60)
        text = kernel.ok("%%gpurun spmd -q\nimport os\nprint(os.environ['RANK'], os.environ['MASTER_ADDR'])")
        assert "[0] 0 127.0.0.2" in text and "[1] 1 127.0.0.2" in text  # ranks by host; rank 0's host is master
        pids = rank_pids(kernel)
        assert len(pids) == 2
        kill_only_the_kernel(kernel)
        assert gone(pids, 20), "rank processes outlived their kernel on workers that stayed"
        assert all(process.poll() is None for process in remote.workers.values())  # the workers did stay
