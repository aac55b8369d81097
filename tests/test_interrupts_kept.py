"""The stop button always stops the cell while a cluster runs with its scheduler in the kernel, and an interrupt of a
``%%gpurun --repeat`` cell between two runs is one line; through a real kernel (jupyter_client).

A scheduler in the kernel's process turned on distributed's GC diagnosis, a garbage collection callback: an
interrupt that came while it ran was "ignored" by Python and the cell ran on (about one in four for a cell that
allocates in a loop). Each interrupt here waits for the cell to say it runs; every wait is bounded well above what
an interrupt takes, and nothing asserts on how long a step took. The first tests run in this process.
"""

from __future__ import annotations

import gc
import queue
import re
import signal
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import distributed.gc as gc_notes
import pytest

from gpu_magics.cluster.background import kept_interrupts
from tests.test_kernel_faults import Kernel, loaded_kernel

TRIES = 12
MARKER = "allocating"
ALLOCATING = f"print({MARKER!r}, flush=True)\nd = {{}}\nwhile True:\n    d = {{i: [i] for i in range(2000)}}\n"
STOPPED_WITHIN = 60.0  # an interrupt that is not lost ends the cell at once; a lost one never does
# A Python callback at every garbage collection, as distributed's GC diagnosis was: an interrupt raised while it
# runs is one Python ignores ("Exception ignored in"), unless the package raises it again.
BUSY_CALLBACK = "import gc\ndef _busy(phase, info):\n    for _ in range(50):\n        pass\ngc.callbacks.append(_busy)"
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def test_distributeds_gc_diagnosis_is_counted_but_never_in_the_gc_callbacks() -> None:
    callbacks = list(gc.callbacks)
    gc_notes.enable_gc_diagnosis()  # a scheduler here before the extension took it out
    try:
        assert len(gc.callbacks) == len(callbacks) + 1
        kept_interrupts.scheduler_gc_off()
        kept_interrupts.scheduler_gc_off()  # once is enough
        assert gc.callbacks == callbacks and gc_notes._gc_diagnosis.enabled
        gc_notes.enable_gc_diagnosis()  # a second scheduler, then both close: distributed's own counting
        gc_notes.disable_gc_diagnosis()
        assert gc.callbacks == callbacks and gc_notes._gc_diagnosis.enabled and gc_notes.gc_collect_duration() == 0
        kept_interrupts.uninstall()  # %unload_ext: distributed's own again, on for the scheduler still here
        assert len(gc.callbacks) == len(callbacks) + 1
    finally:
        kept_interrupts.uninstall()
        gc_notes.disable_gc_diagnosis(force=True)
    assert gc.callbacks == callbacks and not isinstance(gc_notes._gc_diagnosis, kept_interrupts.QuietDiagnosis)


def test_an_interrupt_python_ignored_in_the_main_thread_is_raised_again() -> None:
    assert threading.current_thread() is threading.main_thread()
    raised: list[bool] = []

    def interrupt_once(phase: str, info: dict[str, int]) -> None:
        if not raised:
            raised.append(True)
            raise KeyboardInterrupt  # as if SIGINT came here: Python prints it as ignored and goes on

    hook = sys.unraisablehook
    handler = signal.signal(signal.SIGINT, signal.default_int_handler)  # as a kernel's cell has it (an import
    kept_interrupts.install()  # in another test may have left its own: dask-jobqueue's exits the process)
    gc.callbacks.append(interrupt_once)
    try:
        with pytest.raises(KeyboardInterrupt):
            gc.collect()
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:  # the interrupt comes back here, from the thread that raises it
                time.sleep(0.01)
    finally:
        gc.callbacks.remove(interrupt_once)
        kept_interrupts.uninstall()
        signal.signal(signal.SIGINT, handler)
    assert raised and sys.unraisablehook is hook


@pytest.fixture(scope="module")
def kernel(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Kernel]:
    with loaded_kernel(tmp_path_factory.mktemp("kept")) as started:
        started.ok("%gpucluster --cpu-workers 1 --name kept", timeout=120)
        started.ok("import gpu_magics; gpu_magics.client();", timeout=120)  # its start went on: wait for it
        yield started


def wait_for_marker(kernel: Kernel, msg_id: str, marker: str, timeout: float = 60) -> None:
    """Return once the cell ``msg_id`` printed ``marker`` (it runs)."""
    deadline = time.monotonic() + timeout
    while True:
        remaining = deadline - time.monotonic()
        assert remaining > 0, f"the cell did not print {marker!r} within {timeout} s"
        message = kernel.client.get_iopub_msg(timeout=remaining)
        if message["parent_header"].get("msg_id") != msg_id:
            continue
        if message["msg_type"] == "stream" and marker in message["content"]["text"]:
            return


def interrupt_running(kernel: Kernel, cell: str, marker: str) -> tuple[dict[str, Any], str]:
    """Run ``cell``, interrupt it once it printed ``marker``, and return its reply and what it showed after."""
    msg_id = kernel.start(cell)
    wait_for_marker(kernel, msg_id, marker)
    kernel.manager.interrupt_kernel()  # SIGINT to the kernel's process group, as JupyterLab's stop button does
    try:
        return kernel.finish(msg_id, timeout=STOPPED_WITHIN)
    except (AssertionError, queue.Empty):  # the interrupt was lost: stop the cell for the next test, then fail
        for _ in range(20):
            kernel.manager.interrupt_kernel()
            time.sleep(0.5)
        pytest.fail(f"the interrupt was lost: the cell still ran {STOPPED_WITHIN:.0f} s after it")


def assert_every_interrupt_stops(kernel: Kernel) -> None:
    for attempt in range(TRIES):
        reply, text = interrupt_running(kernel, ALLOCATING, MARKER)
        assert reply["status"] == "error" and reply["ename"] == "KeyboardInterrupt", (attempt, text)
        assert "Exception ignored" not in text, (attempt, text)


@pytest.mark.slow
def test_every_interrupt_stops_an_allocating_cell_while_a_scheduler_runs_here(kernel: Kernel) -> None:
    users = kernel.ok("import distributed.gc\nprint(distributed.gc._gc_diagnosis_users)").strip()
    assert int(users) >= 1  # the scheduler here asked for distributed's GC diagnosis
    assert_every_interrupt_stops(kernel)


@pytest.mark.slow
def test_an_interrupt_ignored_in_a_gc_callback_is_raised_again(kernel: Kernel) -> None:
    """Any other callback, ``__del__`` or weakref callback where Python would ignore the interrupt."""
    kernel.ok(BUSY_CALLBACK)
    try:
        assert_every_interrupt_stops(kernel)
    finally:
        kernel.ok("gc.callbacks.remove(_busy)")


def error_lines(kernel: Kernel, cell: str) -> tuple[dict[str, Any], list[str]]:
    """Run ``cell``; its reply and the lines of the traceback it showed (the iopub error message's, no colours)."""
    msg_id = kernel.start(cell)
    shown: list[str] = []
    deadline = time.monotonic() + 60
    while True:
        message = kernel.client.get_iopub_msg(timeout=max(0.1, deadline - time.monotonic()))
        if message["parent_header"].get("msg_id") != msg_id:
            continue
        if message["msg_type"] == "error":
            shown += [ANSI.sub("", line) for entry in message["content"]["traceback"] for line in entry.splitlines()]
        elif message["msg_type"] == "status" and message["content"]["execution_state"] == "idle":
            break
    reply = kernel.client.get_shell_msg(timeout=60)
    while reply["parent_header"].get("msg_id") != msg_id:
        reply = kernel.client.get_shell_msg(timeout=60)
    return reply["content"], shown


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["cpu-threads", "multi-gpu"])
def test_an_interrupt_between_two_runs_is_one_line(kernel: Kernel, backend: str) -> None:
    """SIGINT comes while the repeat loop runs the package's own code between two runs: the handler raises the
    interrupt there (``kernel_tail.gathered`` is called before each run; here it sends SIGINT to the kernel)."""
    kernel.ok(
        "import functools, signal\nimport gpu_magics.gpurun.graphs.kernel_tail as _tail\n_gathered = _tail.gathered\n"
        "_tail.gathered = functools.partial(signal.raise_signal, signal.SIGINT)"
    )
    try:
        reply, shown = error_lines(kernel, f"%%gpurun {backend} --repeat 100 --no-monitor\n1")
    finally:
        kernel.ok("_tail.gathered = _gathered")
    assert reply["status"] == "error" and reply["ename"] == "KeyboardInterrupt", shown
    frames = [line for line in shown if "gpu_magics" in line or line.startswith(("File ", "Cell "))]
    assert not frames, shown
    assert shown[-1].startswith("KeyboardInterrupt") and len(shown) <= 3, shown
