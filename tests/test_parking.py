"""``%gpucluster park`` and ``resume`` with the driver's stand-in (simulated GPUs): a real IPython shell, a real
``LocalCluster`` with worker processes whose pids the park is given (as a GPU cluster's are), persisted data that is
there after the resume, the resume that work reaching the scheduler brings, and the failures: a process the driver
refuses (nothing stays parked), a resume that cannot get its GPU back (the cluster stays parked and the next try
works), parking twice, resuming what is not parked, a park while tasks run, a stop while parked.

The driver's own calls (``CudaCheckpoint``) run on the GPU machines (``tests/gpu``); here, on a host without a CUDA
driver, they say so in one line."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell

from gpu_magics import gpus
from gpu_magics.cluster.control import kernel_cluster, parking
from gpu_magics.cluster.control.kernel_cluster import Phase
from gpu_magics.cluster.managers.base import ClusterManager
from gpu_magics.cluster.managers.local import cluster as local_cluster
from gpu_magics.cluster.managers.local.cpu import LocalCpuManager
from gpu_magics.cluster.workers import checkpoint
from tests.waiting import wait_for

pytestmark = pytest.mark.slow


def test_the_stand_in_follows_the_drivers_states_and_fails_where_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    driver = checkpoint.StandInCheckpoint()
    driver.lock(11)
    driver.checkpoint(11)
    assert driver.state(11) == "checkpointed"
    with pytest.raises(checkpoint.CheckpointError, match="illegal state"):
        driver.unlock(11)  # a checkpointed process is restored first
    driver.restore(11)
    driver.unlock(11)
    assert driver.state(11) == "running"
    monkeypatch.setenv(checkpoint.FAIL_ENV, "lock:12")
    with pytest.raises(checkpoint.CheckpointError, match="refused to lock"):
        driver.lock(12)
    assert driver.state(12) == "running"


def test_without_a_cuda_driver_the_drivers_calls_say_so() -> None:
    with pytest.raises(checkpoint.CheckpointError, match="no CUDA driver on this host"):
        checkpoint.CudaCheckpoint().state(1)


@pytest.fixture(scope="module")
def shell(loaded_shell: InteractiveShell) -> Iterator[InteractiveShell]:
    """The shell with a cluster of two worker processes up, ``t_x`` persisted on them, and the stand-in driver."""
    patch = pytest.MonkeyPatch()
    patch.setenv("GPU_MAGICS_SOURCE", "fake:2")
    patch.setattr(checkpoint, "_chosen", None)
    patch.setattr(gpus, "_inventory", None)  # read with the simulated GPUs, and put back after the module
    patch.setattr(LocalCpuManager, "park_targets", lambda self: local_cluster.worker_pids(self.cluster))
    loaded_shell.magics_manager.registry["ClusterMagics"].wait_for_workers = True
    assert loaded_shell.run_cell("%gpucluster --cpu-workers 2 --name t_parked").error_in_exec is None
    setup = "import dask.array as da\nt_x = da.arange(1000, chunks=100).persist()\nt_total = int(t_x.sum().compute())"
    assert loaded_shell.run_cell(setup).error_in_exec is None
    try:
        yield loaded_shell
    finally:
        loaded_shell.run_line_magic("gpucluster", "stop")
        patch.undo()


def one_line(shell: InteractiveShell, line: str, capsys: pytest.CaptureFixture[str]) -> str:
    capsys.readouterr()
    shell.run_line_magic("gpucluster", line)
    return capsys.readouterr().out.strip()


def refused(shell: InteractiveShell, line: str) -> str:
    result = shell.run_cell(f"%gpucluster {line}")
    assert type(result.error_in_exec) is UsageError  # IPython's own: the notebook shows its one line
    return str(result.error_in_exec)


def states() -> set[str]:
    current = kernel_cluster.in_use()
    assert current is not None
    pids = current.manager.park_targets().values()
    return {checkpoint.driver().state(pid) for pid in pids}


def parked_in_record() -> int | None:
    """How many workers the cluster's record file says are parked (``None``: not parked)."""
    from gpu_magics.cluster.records import record

    current = kernel_cluster.in_use()
    assert current is not None and current.record is not None
    written = record.ClusterRecord.from_json(json.loads((record.runtime_dir() / current.record.filename).read_text()))
    return None if written.parked is None else written.parked["workers"]


def test_a_park_parks_every_worker_and_work_resumes_them_with_their_data(
    shell: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    said = one_line(shell, "park", capsys)
    assert said.startswith("%gpucluster: parked 2 workers of 't_parked': ")
    assert "of GPU memory back to the server in " in said and said.endswith(
        "the next cell that sends it work resumes them"
    )
    assert kernel_cluster.phase() is Phase.PARKED and states() == {"checkpointed"}
    assert parked_in_record() == 2  # what the side panel, the status bar and /metrics read
    assert "is parked already" in refused(shell, "park")
    status = one_line(shell, "status", capsys)
    assert "'t_parked' is parked since " in status and "(%gpucluster resume: now)" in status
    assert "of GPU memory back to the server, kept in host memory meanwhile; " in status
    assert states() == {"checkpointed"}  # asking how it is resumes nothing
    assert shell.run_cell("t_again = int(t_x.sum().compute())").error_in_exec is None
    out = capsys.readouterr().out
    assert "%gpucluster: resumed 2 workers of 't_parked' in " in out
    assert shell.user_ns["t_again"] == shell.user_ns["t_total"]
    assert kernel_cluster.phase() is Phase.IN_USE and states() == {"running"}
    assert parked_in_record() is None
    assert "'t_parked' is not parked" in refused(shell, "resume")


def test_a_park_the_driver_refuses_for_one_worker_leaves_every_worker_running(
    shell: InteractiveShell, monkeypatch: pytest.MonkeyPatch
) -> None:
    current = kernel_cluster.in_use()
    assert current is not None
    name, pid = sorted(current.manager.park_targets().items())[1]
    monkeypatch.setenv(checkpoint.FAIL_ENV, f"checkpoint:{pid}")
    said = refused(shell, "park")
    assert said.startswith("%gpucluster park: nothing parked, every process keeps its GPU memory: ")
    assert f"{name} (pid {pid}): the driver refused to checkpoint it" in said
    assert kernel_cluster.phase() is Phase.IN_USE and states() == {"running"}


def test_a_resume_that_cannot_get_a_gpu_back_keeps_the_cluster_parked_and_the_next_try_resumes_it(
    shell: InteractiveShell, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    current = kernel_cluster.in_use()
    assert current is not None
    name, pid = sorted(current.manager.park_targets().items())[0]
    one_line(shell, "park", capsys)
    monkeypatch.setenv(checkpoint.FAIL_ENV, f"restore:{pid}")
    said = refused(shell, "resume")
    assert f"1 of 2 processes of 't_parked' could not take their GPU back ({name}: " in said
    assert said.endswith("they stay parked, with their data: run %gpucluster resume to try again")
    assert kernel_cluster.phase() is Phase.PARKED
    monkeypatch.delenv(checkpoint.FAIL_ENV)
    assert one_line(shell, "resume", capsys).startswith("%gpucluster: resumed 2 workers of 't_parked' in ")
    assert kernel_cluster.phase() is Phase.IN_USE and states() == {"running"}
    assert shell.run_cell("assert int(t_x.sum().compute()) == t_total").error_in_exec is None


def test_a_resume_where_the_gpu_has_no_room_asks_the_driver_nothing_and_the_next_try_resumes(
    shell: InteractiveShell, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Another process filled the GPU while parked: a restore that finds too little memory can fail the process for
    good (seen with driver 580), so the resume compares what comes back on each GPU with what is free there first."""
    current = kernel_cluster.in_use()
    assert current is not None
    one_line(shell, "park", capsys)
    assert current.parked is not None
    current.parked = dataclasses.replace(current.parked, comes_back={"GPU-filled": 2 << 30})
    monkeypatch.setattr(checkpoint, "free_by_gpu", lambda source=None: {"GPU-filled": 1 << 30})
    said = refused(shell, "resume")
    assert "cannot take their GPUs back yet (GPU GPU-filled has 1.0 GiB free, and 2.0 GiB must come back)" in said
    assert kernel_cluster.phase() is Phase.PARKED and states() == {"checkpointed"}  # the driver was asked nothing
    assert "could not come back" not in said and "\n" not in said
    monkeypatch.setattr(checkpoint, "free_by_gpu", lambda source=None: {"GPU-filled": 3 << 30})
    assert one_line(shell, "resume", capsys).startswith("%gpucluster: resumed 2 workers of 't_parked' in ")
    assert shell.run_cell("assert int(t_x.sum().compute()) == t_total").error_in_exec is None


def test_a_restore_is_asked_only_with_a_margin_of_free_memory() -> None:
    needs = {"GPU-a": 1 << 30}
    assert checkpoint.short_of_memory(needs, {"GPU-a": 2 << 30}) is None
    assert checkpoint.short_of_memory(needs, {"GPU-a": (1 << 30) + (1 << 20)}) is not None  # 1 MiB spare: no
    assert checkpoint.short_of_memory(needs, {}) is None  # a GPU whose memory cannot be read is not held against it
    assert checkpoint.short_of_memory({"GPU-a": 0}, {"GPU-a": 0}) is None


def test_a_worker_killed_while_parked_is_said_at_the_resume_and_dask_computes_its_data_again(
    shell: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    """Its process ended (killed, out of host memory): nothing of it to resume; the others resume, the line names
    it, and what it held is computed again from the graph (its nanny started a new worker meanwhile)."""
    current = kernel_cluster.in_use()
    assert current is not None
    name, pid = sorted(current.manager.park_targets().items())[0]
    one_line(shell, "park", capsys)
    os.kill(pid, signal.SIGKILL)
    wait_for(lambda: not parking.running(pid), 60, "the killed worker's end")
    said = one_line(shell, "resume", capsys)
    assert said.startswith("%gpucluster: resumed 1 worker of 't_parked' in "), said
    assert said.endswith(
        f"; worker {name} had ended while parked: what it held is gone, and dask computes again what it can"
    )
    assert kernel_cluster.phase() is Phase.IN_USE
    assert shell.run_cell("assert int(t_x.sum().compute()) == t_total").error_in_exec is None
    wait_for(lambda: len(current.client.scheduler_info(n_workers=-1)["workers"]) == 2, 120, "the new worker")


def test_work_that_comes_while_a_park_is_under_way_waits_for_it_then_resumes_the_cluster(
    shell: InteractiveShell, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Between the park's first step (the phase: PARKED) and its workers' checkpoint, work that reaches the
    scheduler waits for the park to end, then resumes the cluster: its tasks never run on workers half parked."""
    from gpu_magics.cluster.control.verbs import park

    copying, gate = threading.Event(), threading.Event()
    copy = parking.offload_all

    def held_copies(current: Any) -> Any:
        copying.set()
        gate.wait(120)
        return copy(current)

    monkeypatch.setattr(parking, "offload_all", held_copies)
    said: list[str] = []
    parker = threading.Thread(target=lambda: said.append(park.park()), name="a-parking-thread")
    parker.start()
    try:
        assert copying.wait(60) and kernel_cluster.phase() is Phase.PARKED
        current = kernel_cluster.in_use()
        assert current is not None and current.parked is None  # under way: its workers not parked yet
        threading.Timer(1.0, gate.set).start()  # the park goes on a second after the work came
        capsys.readouterr()
        assert shell.run_cell("t_again = int(t_x.sum().compute())").error_in_exec is None
    finally:
        gate.set()
        parker.join(60)
    assert said and said[0].startswith("%gpucluster: parked 2 workers of 't_parked': "), said
    assert "%gpucluster: resumed 2 workers of 't_parked' in " in capsys.readouterr().out
    assert shell.user_ns["t_again"] == shell.user_ns["t_total"]
    assert kernel_cluster.phase() is Phase.IN_USE and states() == {"running"}


def test_an_interrupt_during_a_resume_leaves_the_cluster_parked_and_the_next_work_brings_every_worker_back(
    shell: InteractiveShell, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Ctrl-C while ``%gpucluster resume`` waits for the driver: the cell stops, the cluster stays parked (one worker
    may run again already), and the next work resumes the rest and copies every worker's arrays back."""
    current = kernel_cluster.in_use()
    assert current is not None
    _, pid = sorted(current.manager.park_targets().items())[0]
    one_line(shell, "park", capsys)
    resume_one = parking.resume_one

    def interrupted(process: int) -> None:
        if process == pid:
            raise KeyboardInterrupt  # as the kernel raises it while the driver's call waits
        resume_one(process)

    monkeypatch.setattr(parking, "resume_one", interrupted)
    result = shell.run_cell("%gpucluster resume")
    assert isinstance(result.error_in_exec, KeyboardInterrupt)
    assert kernel_cluster.phase() is Phase.PARKED and checkpoint.driver().state(pid) == "checkpointed"
    monkeypatch.setattr(parking, "resume_one", resume_one)
    capsys.readouterr()
    assert shell.run_cell("assert int(t_x.sum().compute()) == t_total").error_in_exec is None
    assert "%gpucluster: resumed 2 workers of 't_parked' in " in capsys.readouterr().out
    assert kernel_cluster.phase() is Phase.IN_USE and states() == {"running"}


def test_work_that_cannot_resume_the_cluster_fails_its_cell_in_one_line_and_the_next_cell_resumes_it(
    shell: InteractiveShell, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    current = kernel_cluster.in_use()
    assert current is not None
    name, pid = sorted(current.manager.park_targets().items())[1]
    code = "from distributed import get_client\nt_client = get_client()\nt_kept = t_client.submit(int, 7, key='t-kept')"
    resumes_ended = noting_resumes(monkeypatch)
    assert shell.run_cell(code + "\nt_kept.result(timeout=30)").error_in_exec is None
    one_line(shell, "park", capsys)
    monkeypatch.setenv(checkpoint.FAIL_ENV, f"restore:{pid}")
    result = shell.run_cell("t_failed = int(t_x.sum().compute())")  # a plain cell: the scheduler's plugin resumes
    assert type(result.error_in_exec) is UsageError  # IPython's own: the notebook shows its one line
    said = str(result.error_in_exec)
    assert said.startswith("%gpucluster resume: 1 of 2 processes of 't_parked' could not take their GPU back (")
    assert f"{name}: " in said and said.endswith("run %gpucluster resume to try again")
    assert kernel_cluster.phase() is Phase.PARKED and "t_failed" not in shell.user_ns
    # a graph whose result is in memory already (another client asks for it): its data is neither failed nor let go
    code = "t_other = Client(t_client.scheduler.address, set_as_default=False)\n"
    code += "t_asked = t_other.submit(int, 7, key='t-kept')"
    assert shell.run_cell("from distributed import Client\n" + code).error_in_exec is None
    wait_for(lambda: "t-kept" in resumes_ended, 120, "the resume the graph of 't-kept' brought to fail")
    assert shell.run_cell("assert t_kept.result(timeout=10) == 7").error_in_exec is None
    shell.run_cell("t_other.close()")
    monkeypatch.delenv(checkpoint.FAIL_ENV)
    assert shell.run_cell("t_again = int(t_x.sum().compute())").error_in_exec is None  # tried again: resumed
    assert "%gpucluster: resumed 2 workers of 't_parked' in " in capsys.readouterr().out
    assert shell.user_ns["t_again"] == shell.user_ns["t_total"]
    assert kernel_cluster.phase() is Phase.IN_USE and states() == {"running"}


def noting_resumes(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The keys of each graph whose resume (the one work brings) has ended, its failure handled, from now on."""
    from gpu_magics.cluster.control.verbs import resume

    ended: list[str] = []
    resumed = resume._resumed

    def noting(*args: Any) -> None:
        try:
            resumed(*args)
        finally:
            ended.extend(str(key) for key in args[-1])

    monkeypatch.setattr(resume, "_resumed", noting)
    return ended


def held_tasks(gate: Path) -> str:
    """A cell that persists ``t_slow``: a task per block of ``t_x`` that runs until ``gate`` exists (at most 120 s)."""
    return (
        "import pathlib, time\n"
        f"def t_held(block, gate=pathlib.Path({str(gate)!r})):\n"
        "    deadline = time.monotonic() + 120\n"
        "    while not gate.exists() and time.monotonic() < deadline:\n"
        "        time.sleep(0.05)\n"
        "    return block\n"
        "t_slow = t_x.map_blocks(t_held, meta=t_x._meta).sum().persist()  # meta: dask calls it here otherwise"
    )


def test_the_scheduler_answers_another_client_while_the_resume_that_work_brought_runs(
    shell: InteractiveShell, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The resume a graph brings runs off the scheduler's event loop: while it is held (the stand-in's restore
    waits until another client got its answer), the scheduler answers that client; then the graph's result comes."""
    from distributed import Client

    current = kernel_cluster.in_use()
    assert current is not None
    one_line(shell, "park", capsys)
    entered, release, late = threading.Event(), threading.Event(), threading.Event()
    restore = checkpoint.StandInCheckpoint.restore

    def held(driver: checkpoint.StandInCheckpoint, pid: int) -> None:
        entered.set()
        if not release.wait(60):  # nobody was answered meanwhile: the scheduler waited for this resume
            late.set()
        restore(driver, pid)

    monkeypatch.setattr(checkpoint.StandInCheckpoint, "restore", held)
    try:
        total = current.client.compute(shell.user_ns["t_x"].sum())  # a graph: the scheduler's plugin resumes
        assert entered.wait(60)
        with Client(current.client.scheduler.address, set_as_default=False, timeout=30) as other:
            answered = len(other.scheduler_info()["workers"])
        assert not late.is_set() and answered == 2  # answered while the resume was held
        assert kernel_cluster.phase() is Phase.PARKED and not total.done()
    finally:
        release.set()
    assert total.result(timeout=60) == shell.user_ns["t_total"]
    shell.run_cell("pass")  # the graph came from no cell: its resume's line is said at the top of the next one
    assert "%gpucluster: resumed 2 workers of 't_parked' in " in capsys.readouterr().out
    assert kernel_cluster.phase() is Phase.IN_USE and states() == {"running"}


def test_a_restart_while_parked_resumes_first_then_restarts(
    shell: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    one_line(shell, "park", capsys)
    said = one_line(shell, "restart", capsys)
    assert said.startswith("%gpucluster: resumed 2 workers of 't_parked' in ")
    assert "restarted 't_parked'" in said
    assert kernel_cluster.phase() is Phase.IN_USE and states() == {"running"}
    setup = "t_x = da.arange(1000, chunks=100).persist()\nassert int(t_x.sum().compute()) == t_total"
    assert shell.run_cell(setup).error_in_exec is None  # the restart let its data go: the next tests have it again


def test_freeing_the_workers_memory_while_parked_resumes_first(
    shell: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    one_line(shell, "park", capsys)
    said = one_line(shell, "free workers", capsys)
    assert said.startswith("%gpucluster: resumed 2 workers of 't_parked' in ")
    assert "%gpucluster free: 2 workers gave back " in said
    assert kernel_cluster.phase() is Phase.IN_USE and states() == {"running"}


def test_a_park_while_tasks_run_is_refused_and_changes_nothing(shell: InteractiveShell, tmp_path: Path) -> None:
    from gpu_magics.cluster.reading import inspection

    gate = tmp_path / "tasks-end"
    try:
        assert shell.run_cell(held_tasks(gate)).error_in_exec is None
        current = kernel_cluster.in_use()
        assert current is not None
        scheduler = inspection.local_scheduler(current.client)
        wait_for(lambda: any(worker.processing for worker in scheduler.workers.values()), 120, "the tasks running")
        said = refused(shell, "park")
        assert "task(s) run on 't_parked' now; park it once the cell that sent them is done" in said
        assert kernel_cluster.phase() is Phase.IN_USE and states() == {"running"}
    finally:
        gate.touch()
    assert shell.run_cell("t_slow.compute()").error_in_exec is None


def test_a_park_between_two_tasks_of_a_graph_is_refused(shell: InteractiveShell) -> None:
    """A graph whose next tasks wait while none runs (here: for a worker that has what they ask for) keeps the
    cluster from parking: parked, its data would be placeholders when they run."""
    from gpu_magics.cluster.reading import inspection

    code = "from distributed import get_client\nt_waits = get_client().submit(sum, [1, 2], resources={'nowhere': 1})"
    assert shell.run_cell(code).error_in_exec is None
    try:
        current = kernel_cluster.in_use()
        assert current is not None
        scheduler = inspection.local_scheduler(current.client)
        states_now = lambda: [t.state for t in list(scheduler.tasks.values()) if t.state != "memory"]  # noqa: E731
        wait_for(lambda: "no-worker" in states_now(), 120, "the task waiting for a worker")
        said = refused(shell, "park")
        assert "task(s) run on 't_parked' now; park it once the cell that sent them is done" in said
        assert kernel_cluster.phase() is Phase.IN_USE and states() == {"running"}
    finally:
        assert shell.run_cell("t_waits.cancel()\ndel t_waits").error_in_exec is None


def test_an_idle_park_that_finds_tasks_running_says_nothing_and_parks_once_they_end(
    shell: InteractiveShell, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """The scheduler's idle clock can lag a graph just sent (a resume's own work): the idle park that then finds
    tasks running waits for the next idle stretch, without a line in the cell that sent them."""
    from gpu_magics.cluster.control.verbs import park
    from gpu_magics.cluster.reading import inspection

    current = kernel_cluster.in_use()
    assert current is not None
    gate = tmp_path / "tasks-end"
    idle_park = park.IdlePark(current, 1.0)
    try:
        assert shell.run_cell(held_tasks(gate)).error_in_exec is None
        scheduler = inspection.local_scheduler(current.client)
        wait_for(lambda: any(worker.processing for worker in scheduler.workers.values()), 120, "the tasks running")
        capsys.readouterr()
        idle_park._idle()  # as the watch calls it when the scheduler's clock says idle
        assert kernel_cluster.phase() is Phase.IN_USE and capsys.readouterr().out == ""
        gate.touch()
        # once the tasks ended and it idled a second
        wait_for(lambda: current.parked is not None, 120, "the park after the tasks ended")  # its workers too
    finally:
        gate.touch()
        idle_park.stop()
    assert "parked" not in capsys.readouterr().out  # parked between cells: said at the top of the next one
    assert shell.run_cell("t_slow.compute()").error_in_exec is None  # resumes it
    out = capsys.readouterr().out
    assert "%gpucluster: parked 2 workers of 't_parked' at " in out and ", after 1 s without a task" in out
    assert kernel_cluster.phase() is Phase.IN_USE


def test_a_stop_while_parked_resumes_first_and_a_cpu_cluster_is_not_parked(
    shell: InteractiveShell, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    one_line(shell, "park", capsys)
    said = one_line(shell, "stop", capsys)
    assert said.startswith("%gpucluster: stopped cluster 't_parked'; the ") and said.endswith(" are gone")
    assert kernel_cluster.phase() in (Phase.IDLE, Phase.CLOSING) and kernel_cluster.in_use() is None
    assert shell.run_cell("%gpucluster --cpu-workers 1 --name t_cpu").error_in_exec is None
    monkeypatch.setattr(LocalCpuManager, "park_targets", ClusterManager.park_targets)  # as it is: none
    assert refused(shell, "park") == (  # the GPUs are simulated here: the command that gives workers that park
        "%gpucluster park: its workers are CPU workers: they hold no GPU memory to give back; %gpucluster --replace "
        "starts one worker per simulated GPU instead, which parks"
    )


def test_the_servers_reclaim_parks_the_cluster_where_asked_and_leaves_a_parked_one_alone(
    shell: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    """What the kernel does for ``GpuMagicsServer.idle_reclaim_park``: the expression the server sends, run here."""
    from gpu_magics.cluster.control.verbs import reclaim
    from gpu_magics.server.reclaim.reclaimer import expression

    assert shell.run_cell("%gpucluster --cpu-workers 2 --name t_reclaimed --replace").error_in_exec is None
    answer = eval(expression(60.0, park=True))  # as the server's silent request evaluates it in the kernel
    assert (answer["parked"], answer["stopped"], answer["kept"]) == (True, False, None)
    assert kernel_cluster.phase() is Phase.PARKED and states() == {"checkpointed"}
    assert answer["line"] == (
        "%gpucluster: idle GPUs for 1 min: the server (GpuMagicsServer.idle_reclaim_min) parked cluster "
        "'t_reclaimed': its GPUs are back on the server and your data is kept; the next cell that sends it work "
        "resumes it"
    )
    again = reclaim.run(60.0, park=True)
    assert (again["parked"], again["stopped"], again["line"]) == (False, False, None)  # nothing more to give back
    assert shell.run_cell("print('next cell')").error_in_exec is None
    assert answer["line"] in capsys.readouterr().out  # said at the top of the next cell
    shell.run_line_magic("gpucluster", "stop")


def test_an_idle_park_that_comes_during_a_change_waits_for_it_then_parks(
    shell: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    """The scheduler can be idle while a start or a scale still brings workers: the idle park waits for the phase
    to settle rather than giving up (a loaded machine's start took longer than ``park_after``, and nothing parked)."""
    from gpu_magics.cluster.background.starting import Starting
    from gpu_magics.cluster.control import owner
    from gpu_magics.cluster.control.machine.events import ChangeAsked, ChangeEnded, WatchAgain
    from gpu_magics.cluster.control.verbs import park

    assert shell.run_cell("%gpucluster --cpu-workers 2 --name t_settling --replace").error_in_exec is None
    current = kernel_cluster.in_use()
    assert current is not None and kernel_cluster.phase() is Phase.IN_USE
    changing = Starting("%gpucluster", current.name, 2, verb="scaling")
    assert owner.post(ChangeAsked(changing, current)) == []
    idle_park = park.IdlePark(current, 0.3)
    try:
        idle_park.arm()
        # idle for longer than park_after, while the change is under way: it waits for the change, not polls
        wait_for(lambda: kernel_cluster.kernel_cluster().idle_waiting is idle_park, 120, "the park to wait")
        assert kernel_cluster.phase() is Phase.CHANGING and states() == {"running"}
        assert owner.post(ChangeEnded(changing)) == [WatchAgain(idle_park)]  # it watches again from now on
        wait_for(lambda: current.parked is not None, 120, "the park after the change")  # its workers too
        assert states() == {"checkpointed"}
    finally:
        idle_park.stop()
    assert one_line(shell, "resume", capsys).startswith("%gpucluster: resumed 2 workers of 't_settling' in ")
    assert kernel_cluster.phase() is Phase.IN_USE
    shell.run_line_magic("gpucluster", "stop")


def test_park_after_parks_an_idle_cluster_and_again_after_work_resumed_it(
    shell: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    shell.run_line_magic("gpucluster", "stop")
    magics = shell.magics_manager.registry["ClusterMagics"]
    magics.park_after = "1s"
    try:  # set back only at the end: set while the cluster runs, it applies to that cluster at once
        assert shell.run_cell("%gpucluster --cpu-workers 2 --name t_idle").error_in_exec is None
        assert shell.run_cell("t_y = da.arange(100, chunks=10).persist()").error_in_exec is None
        assert parked_within(120)
        assert states() == {"checkpointed"}
        assert shell.run_cell("assert int(t_y.sum().compute()) == 4950").error_in_exec is None
        out = capsys.readouterr().out
        assert re.search(r"%gpucluster: parked 2 workers of 't_idle' at [\d:]{8}, after 1 s without a task ", out)
        assert "%gpucluster: resumed 2 workers of 't_idle' in " in out
        assert parked_within(120)  # idle as long again: parked again
    finally:
        magics.park_after = "off"


def parked_within(seconds: float) -> bool:
    """Whether the cluster in use is parked, its workers too (the phase moves first), within ``seconds``."""

    def parked() -> bool:
        current = kernel_cluster.in_use()
        return current is not None and current.parked is not None and kernel_cluster.phase() is Phase.PARKED

    deadline = time.monotonic() + seconds
    while not parked() and time.monotonic() < deadline:
        time.sleep(0.1)
    return parked()


def test_bad_park_lines_and_settings_are_one_line(loaded_shell: InteractiveShell) -> None:
    from traitlets import TraitError

    result = loaded_shell.run_cell("%gpucluster park now")
    assert type(result.error_in_exec) is UsageError
    assert str(result.error_in_exec) == "%gpucluster park: unexpected 'now'"
    magics = loaded_shell.magics_manager.registry["ClusterMagics"]
    with pytest.raises(TraitError, match=r"^park_after: "):
        magics.park_after = "soon"
    assert magics.park_after == "off"
