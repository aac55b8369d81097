"""What a long cell on the cluster shows, through a real kernel as JupyterLab drives it (jupyter_client) with a CPU
cluster (``%gpucluster --cpu-workers 2``): while it runs, the chunks its runs have done (one task per worker holds
them all), in the ``%%gpurun`` panel and in a plain cell's own line, shown from the kernel's threads into the cell,
and a short plain cell shows nothing; an SPMD cell stopped while a rank stalls keeps where it waited in its final
table; an SPMD rank's traceback names the cell as the notebook numbers it.

The chunks wait for the test (a gate file) once one of them has finished, so "before the end" is what the test
sees, not a time it guesses.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.test_kernel_faults import Kernel, loaded_kernel

pytestmark = pytest.mark.slow

GATED = """
import pathlib, time, uuid
import dask.array as da, numpy as np

def gated(block, directory):
    marks = pathlib.Path(directory)
    (marks / f"began-{{uuid.uuid4().hex}}").touch()
    if len(list(marks.glob("began-*"))) > 2:  # the first chunk to count finishes, the others wait for the test
        deadline = time.monotonic() + 120
        while not (marks / "open").exists() and time.monotonic() < deadline:
            time.sleep(0.02)
    return block

x = da.ones((40, 10), chunks=(1, 10)).map_blocks(gated, {directory!r}, meta=np.empty((0, 0)))
print(float(x.sum().compute()))
"""
CHUNKS = re.compile(r"(\d+) / 40 chunks")
TASKS = re.compile(r"(\d+) / (\d+) dask tasks")


@pytest.fixture(scope="module")
def kernel(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Kernel]:
    with loaded_kernel(tmp_path_factory.mktemp("progress")) as started:
        started.ok("%gpucluster --cpu-workers 2 --name progress", timeout=120)
        started.ok("import gpu_magics; gpu_magics.client();", timeout=120)  # its start went on: wait for it
        yield started


def watch(
    kernel: Kernel, msg_id: str, seen: Callable[[dict[str, Any]], None] = lambda message: None, timeout: float = 120
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Every iopub message of the cell (and every display update, whichever thread sent it) until it is idle,
    each passed to ``seen`` as it comes; the cell's reply and the messages."""
    messages: list[dict[str, Any]] = []
    deadline = time.monotonic() + timeout
    while True:
        remaining = deadline - time.monotonic()
        assert remaining > 0, f"the cell did not end within {timeout} s: {messages}"
        message = kernel.client.get_iopub_msg(timeout=remaining)
        ours = message["parent_header"].get("msg_id") == msg_id
        if not ours and message["msg_type"] != "update_display_data":
            continue
        messages.append(message)
        seen(message)
        if ours and message["msg_type"] == "status" and message["content"]["execution_state"] == "idle":
            break
    while True:
        reply = kernel.client.get_shell_msg(timeout=max(1.0, deadline - time.monotonic()))
        if reply["parent_header"].get("msg_id") == msg_id:
            return reply["content"], messages


def shown(message: dict[str, Any]) -> str:
    return str(message["content"].get("data", {}).get("text/plain", ""))


def run_gated(kernel: Kernel, cell: str, gate: Path) -> tuple[dict[str, Any], list[dict[str, Any]], list[str]]:
    """Run ``cell`` and open the gate once a display shows a chunk done; the reply, the messages and what the
    displays showed until then."""
    before: list[str] = []

    def seen(message: dict[str, Any]) -> None:
        if message["msg_type"] in ("display_data", "update_display_data") and not (gate / "open").exists():
            before.append(shown(message))
            if any(int(done) > 0 for done in CHUNKS.findall(shown(message))):
                (gate / "open").touch()

    try:
        reply, messages = watch(kernel, kernel.start(cell), seen)
    finally:
        (gate / "open").touch()
    return reply, messages, before


def test_a_plain_cell_on_the_cluster_shows_its_runs_chunks_done_before_its_end(kernel: Kernel, tmp_path: Path) -> None:
    assert "plain cells now use multi-gpu" in kernel.ok("%gpurun multi-gpu")  # runs folded: one task per worker
    try:
        reply, messages, before = run_gated(kernel, GATED.format(directory=str(tmp_path)), tmp_path)
    finally:
        kernel.ok("%gpurun off")
    assert reply["status"] == "ok", messages
    assert any(int(done) > 0 for text in before for done in CHUNKS.findall(text)), before
    assert all(TASKS.search(text)[1] == "0" for text in before if CHUNKS.search(text)), before  # runs still run
    displays = [m for m in messages if m["msg_type"] == "display_data"]
    (line,) = displays  # one line, under this cell (its parent is the cell's request), updated in place
    assert line["parent_header"]["msg_id"] == reply_id(messages)
    display_id = line["content"]["transient"]["display_id"]
    updates = [m for m in messages if m["msg_type"] == "update_display_data"]
    assert updates and all(m["content"]["transient"]["display_id"] == display_id for m in updates)
    last = shown(updates[-1])
    assert last.endswith(" · 40 / 40 chunks") and (tasks := TASKS.search(last)) and tasks[1] == tasks[2], last
    printed = "".join(m["content"]["text"] for m in messages if m["msg_type"] == "stream")
    assert printed == "400.0\n"  # what the cell prints is as it was


def test_an_interrupted_plain_cell_leaves_its_line_interrupted_and_updates_it_no_more(
    kernel: Kernel, tmp_path: Path
) -> None:
    """No session backend: a plain cell computes on the cluster's client as it is (dask's own graph, a task a
    chunk); Ctrl-C once its line shows a task done."""
    pressed: list[str] = []

    def seen(message: dict[str, Any]) -> None:
        tasks = TASKS.search(shown(message)) if message["msg_type"].endswith("display_data") else None
        if tasks and int(tasks[1]) > 0 and not pressed:
            pressed.append(shown(message))
            kernel.manager.interrupt_kernel()  # as the stop button does

    try:
        reply, messages = watch(kernel, kernel.start(GATED.format(directory=str(tmp_path))), seen)
    finally:
        (tmp_path / "open").touch()  # the chunks still waiting end (an interrupted cell's tasks are let go)
    assert reply["status"] == "error" and reply["ename"] == "KeyboardInterrupt", messages
    assert pressed, messages
    (line,) = [m for m in messages if m["msg_type"] == "display_data"]
    display_id = line["content"]["transient"]["display_id"]
    last = [m for m in messages if m["msg_type"] == "update_display_data"][-1]
    assert last["content"]["transient"]["display_id"] == display_id
    assert shown(last).startswith("interrupted · ") and TASKS.search(shown(last)), shown(last)
    _, after = watch(kernel, kernel.start("print('next')"))
    assert not [m for m in after if m["msg_type"] == "update_display_data"], after  # its line stays as it ended


def test_a_gpurun_cells_panel_shows_its_runs_chunks_done_before_its_end(kernel: Kernel, tmp_path: Path) -> None:
    cell = "%%gpurun multi-gpu" + GATED.format(directory=str(tmp_path))
    reply, messages, before = run_gated(kernel, cell, tmp_path)
    assert reply["status"] == "ok", messages
    assert any(int(done) > 0 for text in before for done in CHUNKS.findall(text)), before


def test_a_short_plain_cell_on_the_cluster_shows_nothing_but_its_own_output(kernel: Kernel) -> None:
    # a long quiet period: what is tested is that a cell ending within it shows no line, on any machine
    kernel.ok("import gpu_magics.gpurun.live.progress as p; p.QUIET_FOR = 20.0")
    try:
        msg_id = kernel.start("import dask.array as da\nprint(int(da.ones(10, chunks=5).sum().compute()))")
        reply, messages = watch(kernel, msg_id)
    finally:
        kernel.ok("p.QUIET_FOR = 1.0")
    assert reply["status"] == "ok"
    kinds = {m["msg_type"] for m in messages} - {"status", "execute_input"}
    assert kinds == {"stream"}, messages


def test_a_ranks_traceback_names_the_cell_as_the_notebook_numbers_it(kernel: Kernel) -> None:
    msg_id = kernel.start("%%gpurun spmd -q\nx = 1\nraise ValueError('boom')")
    reply, messages = watch(kernel, msg_id)
    assert reply["status"] == "error", messages
    number = reply["execution_count"]  # the notebook shows [number] beside the cell
    text = "\n".join("\n".join(m["content"].get("traceback", [])) + shown(m) for m in messages)
    text += "".join(m["content"].get("text", "") for m in messages if m["msg_type"] == "stream")
    assert f'File "<rank cell {number}>", line 2' in text, text


def test_a_stalled_rank_stopped_keeps_where_it_waited_in_the_final_table(kernel: Kernel) -> None:
    kernel.ok("%config GpuMagics.spmd_stall_s = 1.0")
    body = (
        "import os, time\ndef waiting_here():\n    time.sleep(60 if os.environ['RANK'] == '0' else 0)\nwaiting_here()"
    )
    stalled = "cell line 3, in waiting_here"
    tables: list[str] = []

    def seen(message: dict[str, Any]) -> None:
        if shown(message).startswith("spmd · "):
            tables.append(shown(message))
            if stalled in tables[-1] and len([t for t in tables if stalled in t]) == 1:
                kernel.manager.interrupt_kernel()  # Ctrl-C once the row says where rank 0 waits, as a user does

    try:
        reply, messages = watch(kernel, kernel.start(f"%%gpurun spmd\n{body}"), seen)
    finally:
        kernel.ok("%config GpuMagics.spmd_stall_s = 30.0")
    assert reply["status"] == "error" and reply["ename"] == "KeyboardInterrupt", messages
    assert any(stalled in table for table in tables[:-1]), tables  # said while it ran
    final = tables[-1]
    assert "rank 0" in final and "stopped" in final and "no output for" in final and stalled in final, final


def reply_id(messages: list[dict[str, Any]]) -> str:
    return str(messages[-1]["parent_header"]["msg_id"])
