"""A line is checked whatever runs: with a cluster up, a start line that names another cluster or a bad one fails
its cell in one line and leaves the running cluster in use; a line naming the running cluster reuses it;
``--replace`` checks the new cluster before the running one stops; thread counts the host cannot serve are refused.

A real IPython shell with the extension loaded, a real ``LocalCluster`` (``%gpucluster --cpu-workers 1``, worker
processes) up for the module, and a second one in the notebook's namespace for ``--from``; and a real kernel
(jupyter_client) for what a Run All does with such a line.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from distributed import Client, LocalCluster
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell

import gpu_magics
from gpu_magics.cluster.control import queries
from gpu_magics.cluster.control.verbs import stop
from gpu_magics.text.argparsing import most_threads
from tests.free_ports import free_port
from tests.test_kernel_faults import loaded_kernel

pytestmark = pytest.mark.slow

SWITCH = "cluster 't_keep' is up; to switch, run %gpucluster stop first or add --replace"


@pytest.fixture(scope="module")
def shell(loaded_shell: InteractiveShell) -> Iterator[InteractiveShell]:
    """The shell with cluster ``t_keep`` up (waited for), ``t_kept = 5`` and ``t_other``, another ``LocalCluster``."""
    loaded_shell.magics_manager.registry["ClusterMagics"].wait_for_workers = True
    assert loaded_shell.run_cell("%gpucluster --cpu-workers 1 --name t_keep").error_in_exec is None
    loaded_shell.user_ns["t_kept"] = 5
    with LocalCluster(n_workers=1, processes=False, protocol="tcp://", dashboard_address=None) as other:
        loaded_shell.user_ns["t_other"] = other
        yield loaded_shell
    stop.stop()


@pytest.fixture
def keep(shell: InteractiveShell) -> Client:
    """The client of ``t_keep``, checked to be the one in use."""
    current = queries.active()
    assert current is not None and current.name == "t_keep"
    return current.client


def refused(shell: InteractiveShell, line: str) -> str:
    """The one line a ``%gpucluster`` cell failed with."""
    result = shell.run_cell(f"%gpucluster {line}")
    assert isinstance(result.error_in_exec, UsageError), result.error_in_exec
    said = str(result.error_in_exec)
    assert "\n" not in said
    return said


def assert_still_in_use(client: Client, pids: set[int]) -> None:
    """The same cluster in use, with the same worker processes, and working."""
    assert gpu_magics.client() is client and queries.active() is not None
    assert set(client.run(os.getpid).values()) == pids
    assert client.submit(sum, [1, 2]).result(timeout=30) == 3


@pytest.mark.parametrize(
    ("line", "said"),
    [
        ("--from t_other", f"%gpucluster --from t_other: {SWITCH}"),
        ("--address tcp://127.0.0.1:{port}", f"%gpucluster --address tcp://127.0.0.1:{{port}}: {SWITCH}"),
        ("--slurm", f"%gpucluster --slurm: {SWITCH}"),
        ("--from t_nosuchvar", "%gpucluster --from t_nosuchvar: no variable 't_nosuchvar' in this notebook"),
        ("--from t_kept", "%gpucluster --from t_kept: t_kept (int) is not a Dask cluster manager"),
        ("--gateway http://127.0.0.1:{port} --connect t_someone", "%gpucluster --gateway"),
    ],
)
def test_a_line_naming_another_cluster_or_a_bad_one_fails_its_cell(
    shell: InteractiveShell, keep: Client, line: str, said: str
) -> None:
    if "--slurm" in line:
        pytest.importorskip("dask_jobqueue")
    if "--gateway" in line:
        pytest.importorskip("dask_gateway")
    pids = set(keep.run(os.getpid).values())
    port = free_port()
    assert refused(shell, line.format(port=port)).startswith(said.format(port=port))
    assert_still_in_use(keep, pids)


def test_a_line_naming_the_running_cluster_reuses_it(shell: InteractiveShell, keep: Client) -> None:
    pids = set(keep.run(os.getpid).values())
    for line in ("", "--cpu-workers 1", f"--address {keep.scheduler.address}"):
        result = shell.run_cell(f"%gpucluster {line}")
        assert result.error_in_exec is None, line
    assert_still_in_use(keep, pids)


@pytest.mark.parametrize(
    ("line", "said"),
    [
        ("--address tcp://127.0.0.1:{port} --replace --timeout 3", "no scheduler answered within 3 s"),
        ("--from t_kept --replace", "is not a Dask cluster manager"),
        ("--from t_nosuchvar --replace", "no variable 't_nosuchvar'"),
        ("--cpu-workers 1 --threads-per-worker 99999 --replace", "give at most"),
    ],
)
def test_a_replace_that_cannot_start_leaves_the_running_cluster_in_use(
    shell: InteractiveShell, keep: Client, line: str, said: str
) -> None:
    pids = set(keep.run(os.getpid).values())
    assert said in refused(shell, line.format(port=free_port()))
    assert_still_in_use(keep, pids)


def test_a_replace_with_a_cluster_that_answers_switches_to_it(shell: InteractiveShell, keep: Client) -> None:
    other: LocalCluster = shell.user_ns["t_other"]
    try:
        assert shell.run_cell(f"%gpucluster --address {other.scheduler_address} --replace").error_in_exec is None
        assert gpu_magics.client().scheduler.address == other.scheduler_address
    finally:
        shell.run_cell("%gpucluster --cpu-workers 1 --name t_keep --replace")  # the module's cluster again


def test_a_thread_count_the_host_cannot_serve_is_refused_in_one_line(shell: InteractiveShell) -> None:
    most = most_threads()
    result = shell.run_cell(f"%%gpurun cpu-threads --workers {most + 1}\nt_x = 1")
    assert isinstance(result.error_in_exec, UsageError)
    said = str(result.error_in_exec)
    assert said.startswith(f"%%gpurun cpu-threads --workers {most + 1}: this machine runs at most {most} threads")
    assert "\n" not in said and said.endswith(f"give at most {most}")
    magics = shell.magics_manager.registry["GpuMagics"]
    magics.cpu_threads = 99999
    try:
        result = shell.run_cell("%%gpurun cpu-threads\nt_x = 2")
        assert isinstance(result.error_in_exec, UsageError)
        assert str(result.error_in_exec).startswith("%config GpuMagics.cpu_threads = 99999: this machine runs at most")
    finally:
        magics.cpu_threads = 0
    assert shell.user_ns.get("t_x") is None
    result = shell.run_cell(f"%%gpurun cpu-threads --workers {most}\nt_x = 3")
    assert result.error_in_exec is None and shell.user_ns["t_x"] == 3


def test_in_a_kernel_a_line_naming_another_cluster_stops_a_run_all_and_a_failed_replace_keeps_the_cluster(
    tmp_path: Path,
) -> None:
    with loaded_kernel(tmp_path) as kernel:
        kernel.ok("%gpucluster --cpu-workers 1 --name keep", timeout=120)
        kernel.ok("import gpu_magics; gpu_magics.client();", timeout=120)  # its start went on: wait for it
        # a Run All: the cells after the failing one are queued in the kernel while it is busy. A cell that keeps
        # the kernel busy until both were sent: sent to an idle kernel instead, the queued cell could arrive after
        # the failure was dealt with (a busy machine), and a kernel aborts only the requests it holds by then
        gate = tmp_path / "run-all-sent"
        busy = kernel.start(
            f"import pathlib, time\nwhile not pathlib.Path({str(gate)!r}).exists():\n    time.sleep(0.05)"
        )
        bad = kernel.start("%gpucluster --address tcp://127.0.0.1:1")
        queued = kernel.start("print('queued cell ran')")
        gate.touch()
        assert kernel.finish(busy, timeout=60)[0]["status"] == "ok"
        reply, text = kernel.finish(bad, timeout=60)
        assert reply["status"] == "error" and reply["ename"] == "UsageError", text
        assert SWITCH.replace("t_keep", "keep") in text
        queued_reply, queued_text = kernel.finish(queued, timeout=60)
        assert queued_reply["status"] != "ok" and "queued cell ran" not in queued_text  # the Run All stops there
        reply, text = kernel.run(f"%gpucluster --address tcp://127.0.0.1:{free_port()} --replace --timeout 3")
        assert reply["status"] == "error" and "no scheduler answered within 3 s" in text, text
        said = kernel.ok("print(gpu_magics.client().submit(sum, [1, 2]).result())")
        assert said.strip().splitlines()[-1] == "3", said
        assert "keep" in kernel.ok("%gpucluster status")
