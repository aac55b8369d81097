"""Parking on simulated GPUs (``GPU_MAGICS_SOURCE=fake:2``), as a user without a GPU tries it: ``%gpucluster``
starts one worker per simulated GPU, and ``park``, ``resume`` and ``park_after`` go through the CUDA driver's
stand-in, saying the GPUs are simulated; a CPU cluster's refused park names the command that gives workers that park,
which works as printed. ``%config ClusterMagics.park_after`` set on a running cluster applies at once, in one line;
``%gpucluster status`` shows it, the time left, and parked workers as parked. Through a real IPython shell, and
through a real kernel for what a notebook shows: the park's and the resume's lines are HTML (they wrap between words
in JupyterLab, where a long stdout line breaks mid-word)."""

from __future__ import annotations

import re
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from dask.core import flatten
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell

from gpu_magics import gpus
from gpu_magics.cluster.control import kernel_cluster
from gpu_magics.cluster.control.kernel_cluster import Phase
from gpu_magics.cluster.managers.local.simulated import SimulatedGpuManager
from gpu_magics.cluster.reading.running import ActiveCluster
from gpu_magics.cluster.workers import checkpoint, offload
from tests.test_kernel_faults import Kernel, loaded_kernel
from tests.waiting import wait_for

pytestmark = pytest.mark.slow

SIMULATED = "(simulated GPUs, through the CUDA driver's stand-in)"


@pytest.fixture(scope="module")
def shell(loaded_shell: InteractiveShell) -> Iterator[InteractiveShell]:
    """The shell with two simulated GPUs (the inventory and the driver's stand-in read them afresh)."""
    patch = pytest.MonkeyPatch()
    patch.setenv("GPU_MAGICS_SOURCE", "fake:2")
    patch.setattr(checkpoint, "_chosen", None)
    patch.setattr(gpus, "_inventory", None)  # read with the simulated GPUs, and put back after the module
    magics = loaded_shell.magics_manager.registry["ClusterMagics"]
    magics.wait_for_workers = True
    try:
        yield loaded_shell
    finally:
        magics.park_after = "off"
        loaded_shell.run_line_magic("gpucluster", "stop")
        patch.undo()


def said(shell: InteractiveShell, code: str, capsys: pytest.CaptureFixture[str]) -> str:
    capsys.readouterr()
    result = shell.run_cell(code)
    assert result.error_in_exec is None, result.error_in_exec
    return capsys.readouterr().out.strip()


def running() -> ActiveCluster:
    """The cluster the module's first test started (still in use: an assertion names what ended it otherwise)."""
    current = kernel_cluster.in_use()
    log = [f"{done.event.__name__} in {done.phase.value}" for done in kernel_cluster.kernel_cluster().log]
    assert current is not None, f"no cluster in use; the last events: {log[-8:]}"
    return current


def states() -> set[str]:
    current = running()
    return {checkpoint.driver().state(pid) for pid in current.manager.park_targets().values()}


def test_a_cpu_clusters_refused_park_names_the_command_that_parks_and_it_works_as_printed(
    shell: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    assert shell.run_cell("%gpucluster --cpu-workers 2 --name t_cpu").error_in_exec is None
    result = shell.run_cell("%gpucluster park")
    assert type(result.error_in_exec) is UsageError
    line = str(result.error_in_exec)
    assert line == (
        "%gpucluster park: its workers are CPU workers: they hold no GPU memory to give back; %gpucluster --replace "
        "starts one worker per simulated GPU instead, which parks"
    )
    out = said(shell, "%config ClusterMagics.park_after = '5m'", capsys)  # said at once, not when it idles
    assert out == (
        "%gpucluster: 't_cpu' does not park by itself: its workers are CPU workers: they hold no GPU memory to give "
        "back; %gpucluster --replace starts one worker per simulated GPU instead, which parks"
    )
    said(shell, "%config ClusterMagics.park_after = 'off'", capsys)
    command = line.split("; ", 1)[1].split(" starts ", 1)[0]
    assert shell.run_cell(command + " --name t_sim").error_in_exec is None
    current = kernel_cluster.in_use()
    assert current is not None and isinstance(current.manager, SimulatedGpuManager)
    assert len(current.manager.park_targets()) == 2  # one worker per simulated GPU
    setup = "import dask.array as da\nt_x = da.arange(1000, chunks=100).persist()\nt_total = int(t_x.sum().compute())"
    assert shell.run_cell(setup).error_in_exec is None


def test_park_and_resume_go_through_the_stand_in_and_say_the_gpus_are_simulated(
    shell: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    out = said(shell, "%gpucluster park", capsys)
    assert out.startswith(f"%gpucluster: parked 2 workers of 't_sim' {SIMULATED}: ")
    assert "(7.8 KiB of it copied to host memory by the workers at " in out  # t_x's 10 chunks of 100 int64
    assert kernel_cluster.phase() is Phase.PARKED and states() == {"checkpointed"}
    assert held_values(shell) == {"Parked"}  # the arrays wait in host memory, out of the workers' data
    status = said(shell, "%gpucluster status", capsys)
    assert "2 workers parked" in status and "running" not in status  # the scheduler sees them, parked
    out = said(shell, "t_again = int(t_x.sum().compute())", capsys)  # work resumes them, data kept
    assert out.startswith(f"%gpucluster: resumed 2 workers of 't_sim' {SIMULATED} in ")
    assert "(7.8 KiB copied back by the workers at " in out and held_values(shell) == {"ndarray"}
    assert shell.user_ns["t_again"] == shell.user_ns["t_total"] and states() == {"running"}
    assert "2 workers running" in said(shell, "%gpucluster status", capsys)


def test_a_park_whose_arrays_would_not_fit_in_host_memory_is_refused_before_anything_moves(
    shell: InteractiveShell, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(offload.HOST_BYTES_ENV, "4096")  # the stand-in's host: 4 KiB for 7.8 KiB of arrays
    result = shell.run_cell("%gpucluster park")
    assert type(result.error_in_exec) is UsageError
    line = str(result.error_in_exec)
    assert re.fullmatch(  # (t_x and what else the module's cells left on the workers)
        r"%gpucluster park: nothing parked: the \d+\.\d KiB it moves need as much host memory on "
        + re.escape(socket.gethostname())
        + r", where 4\.0 KiB is available; free host memory, or let go of data the notebook no longer needs, "
        r"then park again",
        line,
    ), line
    assert kernel_cluster.phase() is Phase.IN_USE and states() == {"running"} and held_values(shell) == {"ndarray"}


def held_values(shell: InteractiveShell) -> set[str]:
    """The types of what the workers' data holds now for ``t_x``'s chunks."""
    keys = [str(key) for key in flatten(shell.user_ns["t_x"].__dask_keys__())]

    def types(dask_worker: Any) -> list[str]:
        return sorted({type(value).__name__ for key, value in dask_worker.data.items() if str(key) in keys})

    held = running().client.run(types)
    return {name for names in held.values() for name in names}


def test_park_after_set_on_a_running_cluster_applies_at_once_and_status_counts_down(
    shell: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    current = running()
    out = said(shell, "%config ClusterMagics.park_after = '10m'", capsys)
    assert out == (
        "%gpucluster: 't_sim' parks after 10 min without a task (ClusterMagics.park_after), from now on "
        "(%gpucluster status: the time left)"
    )
    watch = current.idle_park
    assert watch is not None and watch.after_s == 600
    wait_for(lambda: watch.left() is not None, timeout=60, what="the idle watch's first look")
    status = said(shell, "%gpucluster status", capsys)
    assert "parks its workers after 10 min without a task (ClusterMagics.park_after) \u00b7 idle now: " in status
    out = said(shell, "%config ClusterMagics.park_after = '1s'", capsys)  # re-armed: the new setting
    # idle for longer already (the scheduler's clock): its park may be said first, from the watch's thread
    setting = "%gpucluster: 't_sim' parks after 1 s without a task (ClusterMagics.park_after)"
    assert any(line.startswith(setting) for line in out.splitlines()), out
    wait_for(lambda: current.parked is not None, timeout=60, what="the idle park")  # once its workers are
    assert states() == {"checkpointed"}
    status = said(shell, "%gpucluster status", capsys)
    assert "parks its workers after 1 s without a task (ClusterMagics.park_after) \u00b7 parked now" in status
    out = said(shell, "%config ClusterMagics.park_after = 'off'", capsys)  # disarmed
    assert out == (
        "%gpucluster: 't_sim' no longer parks by itself (ClusterMagics.park_after = 'off'; %gpucluster park: now)"
    )
    assert current.idle_park is None
    said(shell, "%gpucluster resume", capsys)
    assert "parks its workers" not in said(shell, "%gpucluster status", capsys)


def outputs(kernel: Kernel, code: str, timeout: float = 120) -> list[tuple[str, Any]]:
    """What a cell shows, as the notebook gets it: (message type, stream text or display data), in order."""
    msg_id = kernel.start(code)
    shown: list[tuple[str, Any]] = []
    while True:
        message = kernel.client.get_iopub_msg(timeout=timeout)
        if message["parent_header"].get("msg_id") != msg_id:
            continue
        kind, content = message["msg_type"], message["content"]
        if kind == "stream":
            shown.append((kind, content["text"]))
        elif kind in ("display_data", "execute_result", "error"):
            shown.append((kind, content.get("data", content)))
        elif kind == "status" and content["execution_state"] == "idle":
            return shown


def html_line(shown: list[tuple[str, Any]], begins: str) -> str:
    """The one HTML line the cell showed that begins (in its text) with ``begins``; no such line on stdout."""
    assert not any(kind == "stream" and begins in text for kind, text in shown), shown
    lines = [data for kind, data in shown if kind == "display_data" and data["text/plain"].startswith(begins)]
    assert len(lines) == 1, shown
    assert begins.replace("'", "&#x27;") in lines[0]["text/html"]
    return str(lines[0]["text/plain"])


def test_in_a_kernel_the_park_and_resume_lines_are_html_and_park_after_applies_at_once(tmp_path: Path) -> None:
    with loaded_kernel(tmp_path, "fake:2") as kernel:
        kernel.ok("%gpucluster --name sim", timeout=180)
        shown = outputs(kernel, "%gpucluster park")
        line = html_line(shown, f"%gpucluster: parked 2 workers of 'sim' {SIMULATED}: ")
        assert line.endswith("the next cell that sends it work resumes them")
        shown = outputs(kernel, "%config ClusterMagics.park_after = '10m'")
        html_line(shown, "%gpucluster: 'sim' is parked; once work resumes it, it parks again after 10 min")
        status = kernel.ok("%gpucluster status")
        assert "2 workers parked" in status and "(ClusterMagics.park_after) \u00b7 parked now" in status
        shown = outputs(kernel, "%gpucluster resume")
        html_line(shown, f"%gpucluster: resumed 2 workers of 'sim' {SIMULATED} in ")
        assert "2 workers running" in kernel.ok("%gpucluster status")


def test_a_said_line_is_styled_as_the_displays_are() -> None:
    from gpu_magics.display.format import STYLE
    from gpu_magics.text.said import STYLE as SAID_STYLE
    from gpu_magics.text.said import SaidLine

    assert SAID_STYLE == STYLE
    assert SaidLine("a <b> 'c'")._repr_html_().endswith(">a &lt;b&gt; &#x27;c&#x27;</div>")
