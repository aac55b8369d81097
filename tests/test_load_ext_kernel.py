"""What ``%load_ext gpu_magics`` begins, through a real kernel as JupyterLab drives it (jupyter_client): the worker
server it launches never shows an interrupt of the kernel's cell; an interrupt of ``%load_ext`` itself is one line
and leaves nothing loaded; a cell that imports nothing new does not wait for the imports begun ahead, and a wait
for them is said once.

What would be too quick to catch is made to wait for a file the test writes (``blocker``): a module the worker
server or the kernel imports ahead, or one that ``%load_ext`` imports or calls. No timed assertion: each test waits
for a file or a line that says where the kernel is.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpu_magics.cluster.background.ahead import WAITING_LINE
from tests.test_kernel_faults import Kernel
from tests.waiting import wait_for

pytestmark = pytest.mark.slow

ANSI = re.compile(r"\x1b\[[0-9;]*m")


def blocker(directory: Path, name: str, tail: str = "") -> tuple[Path, Path]:
    """A module ``name`` in ``directory`` whose import writes ``name.began`` and then waits (at most 120 s) for
    ``name.go``; ``tail`` runs after that. Returns the two files."""
    began, go = directory / f"{name}.began", directory / f"{name}.go"
    (directory / f"{name}.py").write_text(
        "import pathlib, time\n"
        f"pathlib.Path({str(began)!r}).touch()\n"
        "deadline = time.monotonic() + 120\n"
        f"while not pathlib.Path({str(go)!r}).exists() and time.monotonic() < deadline:\n"
        "    time.sleep(0.05)\n" + tail
    )
    return began, go


@pytest.fixture
def kernel(tmp_path: Path) -> Iterator[Kernel]:
    """A real kernel, extension not loaded; its working directory (on its ``sys.path``) is ``tmp_path``."""
    started = Kernel(tmp_path)
    try:
        yield started
    finally:
        started.close()


def plain(text: str) -> list[str]:
    """The non-empty lines of ``text``, colours taken out."""
    return [line for line in ANSI.sub("", text).splitlines() if line.strip()]


def assert_one_line_interrupt(reply: dict[str, Any], text: str, line: str) -> None:
    assert reply["status"] == "error" and reply["ename"] == "KeyboardInterrupt", text
    shown = plain(text)
    assert shown[-1] == f"KeyboardInterrupt: {line}", text
    assert not any(part.startswith(("File ", "Cell ", "Traceback")) or "---->" in part for part in shown), text


def test_an_interrupt_of_the_first_cell_never_reaches_the_worker_server_it_launched(
    kernel: Kernel, tmp_path: Path
) -> None:
    """The server's import of its preload is held (by a module put in front of it) until the cell is interrupted."""
    began, go = blocker(tmp_path, "gm_slow_preload", "import gpu_magics.cluster.workers.forkserver_preload\n")
    kernel.ok("import gpu_magics.cluster.workers.forkserver as f; f.PRELOAD_MODULE = 'gm_slow_preload'")
    kernel.ok("%load_ext gpu_magics")
    wait_for(began.exists, timeout=120, what="the worker server importing its preload")
    cell_began = tmp_path / "cell.began"
    msg_id = kernel.start(f"import pathlib, time\npathlib.Path({str(cell_began)!r}).touch()\ntime.sleep(60)")
    wait_for(cell_began.exists, timeout=60, what="the first cell running")
    kernel.manager.interrupt_kernel()  # SIGINT to the kernel's process group, as JupyterLab does
    reply, text = kernel.finish(msg_id, timeout=60)
    assert reply["status"] == "error" and reply["ename"] == "KeyboardInterrupt", text
    go.touch()
    check = (
        "import multiprocessing.forkserver as m, os, pathlib\n"
        "pid = m._forkserver._forkserver_pid\n"
        "status = pathlib.Path(f'/proc/{pid}/status').read_text()\n"
        "ignored = int(next(l for l in status.splitlines() if l.startswith('SigIgn:')).split()[1], 16)\n"
        "print(os.waitpid(pid, os.WNOHANG) == (0, 0), os.getpgid(pid) == pid, bool(ignored & 2))"
    )
    alive = wait_for(
        lambda: (said := kernel.ok(check)).strip().endswith("True True True") and said,
        timeout=120,
        what="the worker server through its preload: alive, in its own group, SIGINT ignored",
    )
    for said in (text, alive):
        assert "forkserver.py" not in said and "Traceback (most recent call last):\n" not in ANSI.sub("", said)
        assert "File " not in ANSI.sub("", said), said


def test_an_interrupt_while_load_ext_imports_is_one_line_and_loads_nothing(kernel: Kernel, tmp_path: Path) -> None:
    began, _ = blocker(tmp_path, "gm_slow_magics", "raise AssertionError('not interrupted')\n")
    kernel.ok("from gpu_magics.magics import extension as e; e.MAGICS_CLASSES += ('gm_slow_magics:Nothing',)")
    msg_id = kernel.start("%load_ext gpu_magics")
    wait_for(began.exists, timeout=120, what="%load_ext importing")
    kernel.manager.interrupt_kernel()
    reply, text = kernel.finish(msg_id, timeout=60)
    assert_one_line_interrupt(reply, text, "%load_ext gpu_magics was interrupted and did not load; run it again")
    assert_loads_again(kernel, "e.MAGICS_CLASSES = e.MAGICS_CLASSES[:-1]")


def test_an_interrupt_while_load_ext_registers_is_one_line_once_all_of_it_is_undone(
    kernel: Kernel, tmp_path: Path
) -> None:
    """An interrupt while the magics and hooks are registered is held until they all are, then all of it goes."""
    began, go = tmp_path / "hook.began", tmp_path / "hook.go"
    (tmp_path / "gm_hook.py").write_text(
        "import pathlib, time\n\n\ndef hook(shell):\n"
        f"    pathlib.Path({str(began)!r}).touch()\n"
        "    deadline = time.monotonic() + 120\n"
        f"    while not pathlib.Path({str(go)!r}).exists() and time.monotonic() < deadline:\n"
        "        time.sleep(0.05)\n"
    )
    kernel.ok("from gpu_magics.magics import extension as e; e.LOAD_HOOKS += ('gm_hook:hook',)")
    msg_id = kernel.start("%load_ext gpu_magics")
    wait_for(began.exists, timeout=120, what="%load_ext registering")
    kernel.manager.interrupt_kernel()  # the signal is the kernel's when this returns: held from here on
    go.touch()
    reply, text = kernel.finish(msg_id, timeout=60)
    assert_one_line_interrupt(reply, text, "%load_ext gpu_magics was interrupted and did not load; run it again")
    assert_loads_again(kernel, "e.LOAD_HOOKS = e.LOAD_HOOKS[:-1]")


def assert_loads_again(kernel: Kernel, undo: str) -> None:
    """Nothing of the interrupted load is left (magics, hooks, the imports ahead), and ``%load_ext`` works again."""
    left = kernel.ok(
        "ip = get_ipython()\n"
        "from gpu_magics.cluster.background import ahead\n"
        "print(ip.find_line_magic('gpucluster') is None, ip.find_cell_magic('gpurun') is None,\n"
        "      'gpu_magics' not in ip.extension_manager.loaded, not ahead.importing(),\n"
        "      not [t for t in ip.ast_transformers if type(t).__name__ == 'CellGate'])"
    )
    assert left.split() == ["True"] * 5, left
    kernel.ok(undo)
    kernel.ok("%load_ext gpu_magics")
    assert "no cluster is running" in kernel.ok("%gpucluster status")


def test_a_cell_that_imports_nothing_new_does_not_wait_for_the_imports_begun_ahead(
    kernel: Kernel, tmp_path: Path
) -> None:
    """The imports begun ahead are held (by a module added to them) until the test lets them go; the first cell
    ends while they are held, and a cell that imports something new waits, says so once, and goes on."""
    began, go = blocker(tmp_path, "gm_slow_ahead")
    kernel.ok("import dask, gpu_magics.cluster.background.ahead as a; a.KERNEL_MODULES += ('gm_slow_ahead',)")
    kernel.ok("%load_ext gpu_magics")
    first = kernel.ok(
        "N = 4_000\nimport dask\ndask.config.set({'array.chunk-size': '64MiB'})\n"
        "import gpu_magics.cluster.background.ahead as a\nprint('importing' if a.importing() else 'done')",
        timeout=120,
    )
    assert first.strip() == "importing" and not go.exists()
    wait_for(began.exists, timeout=120, what="the imports ahead reaching the held module")
    msg_id = kernel.start("import gm_slow_ahead\nprint('imported')")
    seen = kernel.read_until(msg_id, WAITING_LINE, timeout=60)
    go.touch()
    messages = until_idle(kernel, msg_id, timeout=120)
    said = seen + "".join(message["content"].get("text", "") for message in messages)
    assert said.count(WAITING_LINE) == 1 and said.strip().endswith("imported"), said
    # in a notebook the line is an output that the end of the wait empties: an executed notebook keeps no trace of it
    (shown,) = [m for m in messages if m["msg_type"] == "update_display_data"]
    assert shown["content"]["data"] == {"text/plain": "", "text/html": ""}
    later = kernel.ok("%gpucluster status\nimport json\nprint(a.importing())")
    assert WAITING_LINE not in later and later.strip().endswith("False"), later


def until_idle(kernel: Kernel, msg_id: str, timeout: float) -> list[dict[str, Any]]:
    """The output messages of the cell ``msg_id`` until it ends (it must end without an error)."""
    found = []
    deadline = time.monotonic() + timeout
    while True:
        message = kernel.client.get_iopub_msg(timeout=max(0.1, deadline - time.monotonic()))
        if message["parent_header"].get("msg_id") != msg_id:
            continue
        if message["msg_type"] == "status" and message["content"]["execution_state"] == "idle":
            break
        assert message["msg_type"] != "error", message["content"]
        found.append(message)
    return found


def test_an_interrupt_while_a_cell_waits_for_the_imports_is_one_line(kernel: Kernel, tmp_path: Path) -> None:
    _, go = blocker(tmp_path, "gm_slow_ahead")
    kernel.ok("import gpu_magics.cluster.background.ahead as a; a.KERNEL_MODULES += ('gm_slow_ahead',)")
    kernel.ok("%load_ext gpu_magics")
    msg_id = kernel.start("import gm_slow_ahead\nprint('imported')")
    queued = kernel.start("print('queued cell ran')")
    seen = kernel.read_until(msg_id, WAITING_LINE, timeout=120)
    kernel.manager.interrupt_kernel()
    reply, text = kernel.finish(msg_id, timeout=60)
    assert_one_line_interrupt(
        reply,
        seen + text,
        "interrupted while waiting for the imports that %load_ext gpu_magics began (dask, distributed)",
    )
    assert "imported" not in text.replace(WAITING_LINE, "")
    queued_reply, queued_text = kernel.finish(queued, timeout=30)
    assert queued_reply["status"] != "ok" and "queued cell ran" not in queued_text  # Jupyter's queue stops
    go.touch()
    assert kernel.ok("import gm_slow_ahead\nprint('later')", timeout=120).strip().endswith("later")
