"""What a catch lets go leaves a trace: the ``gpu_magics`` logger writes to the kernel's log file, not the notebook."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest
from IPython.core.interactiveshell import InteractiveShell

from gpu_magics.cluster.records.record import runtime_dir
from gpu_magics.text import units

BROKEN_DISPLAY = """
from gpu_magics.cluster.background.starting import Starting

t_start = Starting("%gpucluster", "t_logged", 2)

def t_broken(progress):
    raise RuntimeError("the progress display broke")

t_start.listen(t_broken)
t_start.run_here(lambda start: start.update(joined=1) or "started")
t_result = t_start.info
"""


def kernel_log() -> Path:
    return runtime_dir() / f"gpu-magics-kernel-{os.getpid()}.log"


def test_an_error_a_catch_lets_go_is_in_the_kernels_log_file_not_the_notebook(
    loaded_shell: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    before = kernel_log().read_text(encoding="utf-8") if kernel_log().exists() else ""
    capsys.readouterr()
    result = loaded_shell.run_cell(BROKEN_DISPLAY)
    assert result.success and loaded_shell.user_ns["t_result"] == "started"  # the start went on
    written = kernel_log().read_text(encoding="utf-8")[len(before) :]
    assert "gpu_magics DEBUG showing a start's progress (let go): RuntimeError: the progress display broke" in written
    assert "Traceback (most recent call last)" in written
    assert 'raise RuntimeError("the progress display broke")' in written
    shown = capsys.readouterr()
    assert "broke" not in shown.out + shown.err
    assert oct(kernel_log().stat().st_mode & 0o777) == "0o600"


def test_a_logged_traceback_is_never_read_as_a_failed_starts_cause(loaded_shell: InteractiveShell) -> None:
    """A failed start names the last error distributed wrote to the file; the package's records are indented."""
    from gpu_magics.cluster.background import start_logs

    size = start_logs.log_path().stat().st_size
    try:
        raise ValueError("let go, not the start's cause")
    except ValueError as error:
        units.dropped("t_a courtesy", error)
    assert "ValueError: let go" in kernel_log().read_text(encoding="utf-8")[size:]
    assert start_logs.last_error(kernel_log(), size) is None


def test_the_package_logger_writes_nowhere_else_in_the_kernel(loaded_shell: InteractiveShell) -> None:
    assert units.logger.propagate is False  # never to the root logger, whose last resort prints to the notebook
    assert units.logger.getEffectiveLevel() == logging.DEBUG


@pytest.mark.parametrize(
    ("logger", "note"),
    [
        ("distributed.gc", "full garbage collections took 13%% CPU time recently (t_note)"),
        ("distributed.batched", "Batched Comm Closed <TCP (closed) local=tcp://127.0.0.1:1> (t_note)"),
    ],
)
def test_a_hosted_schedulers_notes_go_to_the_file_not_the_notebook(
    loaded_shell: InteractiveShell, capsys: pytest.CaptureFixture[str], logger: str, note: str
) -> None:
    """distributed's scheduler (in this kernel for a cluster started here) notes slow collections on a busy host,
    and the closed stream of a worker that went (a stop that cancelled its batch job), with a traceback."""
    size = kernel_log().stat().st_size if kernel_log().exists() else 0
    capsys.readouterr()
    try:
        raise OSError("the worker went")
    except OSError:
        logging.getLogger(logger).warning(note, exc_info=True)
    assert "t_note" in kernel_log().read_text(encoding="utf-8")[size:]
    shown = capsys.readouterr()
    assert "t_note" not in shown.out + shown.err


def test_unloading_gives_the_logger_back(loaded_shell: InteractiveShell) -> None:
    loaded_shell.run_line_magic("unload_ext", "gpu_magics")
    try:
        assert not [h for h in units.logger.handlers if type(h).__name__ == "_KernelFile"]
        assert units.logger.propagate is True
        assert units.logger.level == logging.NOTSET
        for name in ("distributed.gc", "distributed.batched"):
            notes = logging.getLogger(name)
            assert notes.propagate is True and not [h for h in notes.handlers if type(h).__name__ == "_KernelFile"]
    finally:
        loaded_shell.run_line_magic("load_ext", "gpu_magics")


def test_a_repeating_failure_is_logged_once_when_asked(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="gpu_magics")
    for _ in range(3):
        try:
            raise OSError("the same failure")
        except OSError as error:
            units.dropped("t_reading in a loop", error, once=True)
    assert [r.getMessage() for r in caplog.records if "t_reading" in r.getMessage()] == [
        "t_reading in a loop (let go): OSError: the same failure"
    ]
