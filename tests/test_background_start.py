"""``%gpucluster`` in a notebook gives the prompt back at once and the cluster starts while cells run; through a
real kernel, as JupyterLab drives it (jupyter_client), with real worker processes (CPU workers).

A slow worker start is a worker preload file that holds each worker's start until the test lets it go (``go``):
the start is then surely under way when the next request comes. Every wait is for the thing itself (a worker's
start held, a line shown), bounded.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from gpu_magics.cluster.background.ahead import WAITING_LINE
from tests.test_kernel_faults import Kernel, loaded_kernel
from tests.waiting import wait_for

pytestmark = pytest.mark.slow

SUM_CELL = "%%gpurun multi-gpu\nimport dask.array as da\nprint(int(da.ones(10, chunks=5).sum().compute()))"
WAITING_FOR_START = "%%gpurun: waiting for the cluster to start"
HOLD_S = 300  # how long a worker's start is held at most: far beyond any bound below, so none passes by it


def held_preload(kernel: Kernel, directory: Path) -> Path:
    """Hold each worker's start in the kernel (a worker preload, set in its dask config) until the file returned
    exists (at most ``HOLD_S``); each start leaves a mark (``began-PID`` in ``directory``) before it waits."""
    go, path = directory / "workers-go", directory / "held_preload.py"
    path.write_text(
        "import os, pathlib, time\n"
        f"directory, deadline = pathlib.Path({str(directory)!r}), time.monotonic() + {HOLD_S}\n"
        "(directory / f'began-{os.getpid()}').touch()\n"
        "while not (directory / 'workers-go').exists() and time.monotonic() < deadline:\n"
        "    time.sleep(0.05)\n"
    )
    kernel.ok(f"import dask; dask.config.set({{'distributed.worker.preload': [{str(path)!r}]}})")
    return go


def starts_held(directory: Path, count: int = 2) -> None:
    """Wait until ``count`` workers' starts are held in their preload."""
    wait_for(lambda: len(list(directory.glob("began-*"))) >= count, 120, f"{count} workers' starts held")


def descendants(pid: int) -> set[int]:
    try:
        return {child.pid for child in psutil.Process(pid).children(recursive=True)}
    except psutil.NoSuchProcess:
        return set()


def worker_processes(pid: int) -> set[int]:
    """The kernel's worker processes: the children of the worker server it forks them from."""
    found = set()
    try:
        for child in psutil.Process(pid).children():
            if "forkserver" in " ".join(child.cmdline()):
                found |= {worker.pid for worker in child.children(recursive=True)}
    except psutil.NoSuchProcess:
        pass
    return found


def all_output(kernel: Kernel, seconds: float, until: str | None = None) -> list[dict[str, Any]]:
    """Every output message (displays, their updates, streams) the kernel sends within ``seconds`` (``until``: or
    until one that shows this text, and a second more)."""
    messages = []
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        try:
            message = kernel.client.get_iopub_msg(timeout=left)
        except Exception:
            break
        if message["msg_type"] in ("display_data", "update_display_data", "stream", "error"):
            messages.append(message)
            if until is not None and until in text_of(message):
                deadline = min(deadline, time.monotonic() + 1.0)
    return messages


def text_of(message: dict[str, Any]) -> str:
    content = message["content"]
    return str(content.get("text") or content.get("data", {}).get("text/plain", "") or content.get("evalue", ""))


@pytest.fixture
def kernel(tmp_path: Path) -> Any:
    with loaded_kernel(tmp_path) as started:
        yield started


def test_the_magic_returns_while_workers_start_and_the_next_cell_gets_its_answer(
    kernel: Kernel, tmp_path: Path
) -> None:
    go = held_preload(kernel, tmp_path)
    try:
        text = kernel.ok("%gpucluster --cpu-workers 2 --name bg")
        assert "starting 'bg'" in text and "Cluster 'bg'" not in text  # its line, not yet the cluster
        assert "starting 'bg'" in kernel.ok("%gpucluster status")  # said as far as it got, without waiting
        kernel.start(SUM_CELL)
        shown = all_output(kernel, 120.0, until=WAITING_FOR_START)
    finally:
        go.touch()
    shown += all_output(kernel, 180.0, until="10\n")
    said = [text_of(message) for message in shown]
    assert any(text.startswith(WAITING_FOR_START) for text in said)
    waited = [text for text in said if text.startswith("%%gpurun: waited")]
    assert waited and waited[-1].endswith("for the cluster to start, not counted in the cell's time")
    assert not any("not in the times below" in text for text in said)  # said once, by the line
    assert "10\n" in said  # the cell's answer
    assert "2 workers running" in kernel.ok("%gpucluster status")


def test_the_line_updates_in_place_and_ends_as_the_cluster(kernel: Kernel) -> None:
    """The start's line is one output, updated in place until it is the cluster. On a busy host the cell first
    waits for the imports ``%load_ext`` began: that line is an output of its own, emptied when the wait ends."""
    msg_id = kernel.start("%gpucluster --cpu-workers 2 --name live")
    messages = all_output(kernel, 180.0, until="2 workers running")  # the line's last frame
    frames: dict[str | None, list[str]] = {}  # each output the cell showed -> its frames, in order
    for m in messages:
        display_id = (m["content"].get("transient") or {}).get("display_id")
        if m["msg_type"] == "display_data" and m["parent_header"].get("msg_id") == msg_id:
            frames[display_id] = [text_of(m)]
        elif m["msg_type"] == "update_display_data":
            assert display_id in frames, f"an update of an output the cell did not show: {text_of(m)!r}"
            frames[display_id].append(text_of(m))
    waits = [shown for shown in frames.values() if shown[0] == WAITING_LINE]
    assert len(waits) <= 1 and all(shown[-1] == "" for shown in waits), waits
    (line,) = [shown for shown in frames.values() if shown[0] != WAITING_LINE]
    assert "starting 'live'" in line[0] and len(line) > 1, line
    assert "Cluster 'live'" in line[-1] and "2 workers running" in line[-1], line
    # distributed's own lines (its loggers' names, its tracebacks) never reach the notebook; the package's line that
    # says a busy host's first cell waits for the imports %load_ext began names distributed, and is no leak
    said = [text_of(m).replace(WAITING_LINE, "") for m in messages if m["msg_type"] in ("stream", "error")]
    leaked = [text for text in said if "distributed" in text or "Traceback" in text]
    assert not leaked, leaked


def gone(pids: set[int], seconds: float) -> set[int]:
    """Those of ``pids`` still alive after waiting up to ``seconds`` for them to end."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and any(psutil.pid_exists(p) for p in pids):
        time.sleep(0.2)
    return {p for p in pids if psutil.pid_exists(p)}


def test_a_failed_start_fails_the_next_cell_once_with_nothing_left(kernel: Kernel, tmp_path: Path) -> None:
    kernel.ok("import dask; dask.config.set({'distributed.worker.preload': ['no_such_preload_module']})")
    kernel.ok("%gpucluster --cpu-workers 2 --name broken")
    shown = all_output(kernel, 120.0, until="no_such_preload_module")  # the start's line: it failed
    assert any("no_such_preload_module" in text_of(message) for message in shown), [text_of(m) for m in shown]
    reply, text = kernel.run("print('next')")
    assert reply["status"] == "error" and reply["ename"] == "UsageError"  # a Run All stops here
    assert "next" not in text and "(this cell did not run)" in text
    assert "No module named 'no_such_preload_module'" in text and "gpu-magics-kernel-" in text
    assert "Traceback" not in text and "distributed.nanny" not in text
    assert kernel.ok("print('again')").strip() == "again"  # said once
    assert worker_processes(kernel.manager.provisioner.pid) == set()  # type: ignore[union-attr]
    log = next(tmp_path.glob("gpu-magics-kernel-*.log"))
    assert "no_such_preload_module" in log.read_text() and log.stat().st_mode & 0o077 == 0
    reply, text = kernel.run(SUM_CELL)
    assert reply["status"] == "error" and "no cluster is running" in text


def test_stop_during_the_start_leaves_nothing(kernel: Kernel, tmp_path: Path) -> None:
    go = held_preload(kernel, tmp_path)
    try:
        kernel.ok("%gpucluster --cpu-workers 2 --name stopped")
        pid = kernel.manager.provisioner.pid  # type: ignore[union-attr]
        starts_held(tmp_path)
        started = worker_processes(pid)
        # it answers while the workers' starts are held (up to HOLD_S): it does not wait for them
        text = kernel.ok("%gpucluster stop", timeout=120)
    finally:
        go.touch()
    assert "stopped 'stopped' while it was starting" in text
    assert gone(started | worker_processes(pid), 120.0) == set()
    assert not list(tmp_path.glob("gpu-magics-cluster-*.json"))  # no record left for the side panel
    assert "no cluster is running" in kernel.ok("%gpucluster status")


def test_an_interrupted_wait_leaves_the_start_going(kernel: Kernel, tmp_path: Path) -> None:
    go = held_preload(kernel, tmp_path)
    try:
        kernel.ok("%gpucluster --cpu-workers 2 --name waited")
        msg_id = kernel.start(SUM_CELL)
        kernel.read_until(msg_id, WAITING_FOR_START, 120)
        kernel.manager.interrupt_kernel()
        reply, _ = kernel.finish(msg_id, timeout=60)
    finally:
        go.touch()
    assert reply["status"] == "error" and reply["ename"] == "KeyboardInterrupt"
    text = kernel.ok(SUM_CELL, timeout=180)  # the start went on: the next cell runs on it
    assert text.rstrip().endswith("10")


def test_a_kernel_restart_during_the_start_leaves_no_worker(kernel: Kernel, tmp_path: Path) -> None:
    go = held_preload(kernel, tmp_path)
    try:
        pid = kernel.manager.provisioner.pid  # type: ignore[union-attr]
        kernel.ok("%gpucluster --cpu-workers 2 --name restarted")
        starts_held(tmp_path)
        started = worker_processes(pid) | descendants(pid)
        kernel.manager.restart_kernel(now=False)
    finally:
        go.touch()
    assert gone(started, 120.0) == set()


def test_restart_and_scale_go_on_in_the_background_as_a_start_does(kernel: Kernel) -> None:
    kernel.ok("%gpucluster --cpu-workers 2 --name changed")
    before = kernel.worker_pids()  # waits for the start
    text = kernel.ok("%gpucluster restart")
    assert "restarting 'changed'" in text and "Cluster 'changed'" not in text
    after = kernel.worker_pids()  # waits for the restart
    assert len(after) == 2 and not set(after) & set(before)
    text = kernel.ok("%gpucluster scale 1")
    assert "scaling 'changed'" in text
    assert len(kernel.worker_pids()) == 1
    assert "1 worker running" in kernel.ok("%gpucluster status")


PIDS_CELL = (
    "import os, dask.array as da\n"
    "pids = set(da.ones(100, chunks=10).map_blocks(lambda b: b * 0 + os.getpid()).compute().tolist())\n"
    "print('ran in the kernel' if os.getpid() in pids else f'ran in {len(pids)} other processes')"
)


def test_a_plain_cell_right_after_the_start_runs_on_the_cluster(kernel: Kernel, tmp_path: Path) -> None:
    """A Run All: the cells after ``%gpucluster`` are queued at once, while the workers still start."""
    go = held_preload(kernel, tmp_path)
    cells = [
        "%gpucluster --cpu-workers 2 --name runall --client c",
        PIDS_CELL,
        "import distributed; print(distributed.get_client() is c)",
        "import dask.array as da; y = da.arange(40, chunks=10).persist(); print(sorted(c.who_has(y).keys()) != [])",
        "print(int(y.sum().compute()))",
    ]
    ids = [kernel.start(cell) for cell in cells]
    try:
        starts_held(tmp_path)
    finally:
        go.touch()
    replies = [kernel.finish(msg_id, timeout=180) for msg_id in ids]
    assert all(reply["status"] == "ok" for reply, _ in replies), replies
    texts = [text for _, text in replies]
    assert "ran in the kernel" not in texts[1] and "other processes" in texts[1]
    assert texts[2].strip() == "True"  # the default client, and --client's name, from the next cell on
    assert texts[3].strip() == "True"  # persisted on the workers, not computed here
    assert texts[4].strip() == "780"


def test_an_interrupted_start_wait_is_one_line_and_the_queue_stops(kernel: Kernel, tmp_path: Path) -> None:
    go = held_preload(kernel, tmp_path)
    try:
        kernel.ok("%gpucluster --cpu-workers 2 --name waited2")
        first = kernel.start(SUM_CELL)
        queued = kernel.start("print('queued cell ran')")
        kernel.read_until(first, WAITING_FOR_START, 120)
        kernel.manager.interrupt_kernel()
        reply, text = kernel.finish(first, timeout=60)
    finally:
        go.touch()
    assert reply["status"] == "error" and reply["ename"] == "KeyboardInterrupt"
    assert "'waited2' goes on starting in the background" in text and "%gpucluster stop ends it" in text
    assert "run_cell_magic" not in text and "Error in callback" not in text
    queued_reply, queued_text = kernel.finish(queued, timeout=30)
    assert queued_reply["status"] != "ok" and "queued cell ran" not in queued_text  # Jupyter's queue stopped
