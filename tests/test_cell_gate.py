"""A magic called outside a cell waits for the imports ``%load_ext`` began (a cell waits only where it imports
something new: ``tests/test_load_ext_kernel.py``); what a start needs is checked before the magic returns.

The imports are made slow by one more module that sleeps, added to the list ``%load_ext`` imports ahead.
"""

from __future__ import annotations

import builtins
import importlib
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell

from gpu_magics.cluster.background import ahead
from gpu_magics.cluster.managers import needs
from gpu_magics.cluster.managers.local.cpu import LocalCpuManager
from gpu_magics.cluster.options import parse_cluster_line

SLOW_IMPORT = "gpu_magics_slow_import_for_test"


def slow_module(directory: Path, seconds: float) -> None:
    (directory / f"{SLOW_IMPORT}.py").write_text(f"import time\ntime.sleep({seconds})\n")


@pytest.fixture
def shell(
    _session_shell: InteractiveShell, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[InteractiveShell]:
    """The test shell; each test loads the extension with a cell (as a notebook does), and it is unloaded after."""
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("GPU_MAGICS_RUNTIME_DIR", str(tmp_path))
    yield _session_shell
    _session_shell.run_line_magic("unload_ext", "gpu_magics")


@pytest.mark.slow
def test_a_magic_called_outside_a_cell_waits_for_the_imports(
    shell: InteractiveShell, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    slow_module(tmp_path, 2.0)
    monkeypatch.setattr(ahead, "KERNEL_MODULES", (*ahead.KERNEL_MODULES, SLOW_IMPORT))
    monkeypatch.setattr(ahead, "_thread", None)
    shell.run_cell("%load_ext gpu_magics")
    assert ahead.importing()
    shell.run_line_magic("gpucluster", "status")  # from a script, no cell around it
    assert not ahead.importing() and SLOW_IMPORT in sys.modules


def test_an_import_that_fails_is_not_called_missing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / "gm_broken_pkg.py").write_text("from distributed import NoSuchNameAnywhere\n")
    with pytest.raises(UsageError) as broken:
        needs.require("gm_broken_pkg", "%gpucluster --slurm", "gm-broken-pkg is not installed")
    said = str(broken.value)
    assert "not installed" not in said and "is installed but importing gm_broken_pkg failed" in said
    assert "ImportError: cannot import name 'NoSuchNameAnywhere'" in said and "\n" not in said
    with pytest.raises(UsageError, match=r"^%gpucluster --slurm: gm-absent-pkg is not installed$"):
        needs.require("gm_absent_pkg", "%gpucluster --slurm", "gm-absent-pkg is not installed")


def test_a_count_of_cpu_workers_the_host_cannot_start_is_refused_before_anything_starts(
    shell: InteractiveShell,
) -> None:
    from gpu_magics.cluster.control import queries

    shell.run_cell("%load_ext gpu_magics")
    with pytest.raises(UsageError) as refused:
        shell.run_line_magic("gpucluster", "--cpu-workers 100000")
    said = str(refused.value)
    assert said.startswith("%gpucluster --cpu-workers 100000: this machine can start at most ") and "\n" not in said
    assert queries.active() is None and queries.start_under_way() is None
    with pytest.raises(UsageError, match=r"^%gpucluster scale 100000: this machine can start at most"):
        LocalCpuManager(parse_cluster_line("--cpu-workers 1")).check_scale(100000, "scale")


def test_a_protocol_without_its_package_fails_the_magics_own_cell(shell: InteractiveShell) -> None:
    from gpu_magics.cluster.control import queries

    shell.run_cell("%load_ext gpu_magics")
    # as in a notebook, on this extension's instance only (a %config would stay on the shell for later tests)
    shell.magics_manager.registry["ClusterMagics"].wait_for_workers = False
    result = shell.run_cell("%gpucluster --cpu-workers 1 --protocol ucx")
    assert isinstance(result.error_in_exec, UsageError)
    assert "UCX needs the distributed-ucxx package" in str(result.error_in_exec)
    assert queries.active() is None and queries.start_under_way() is None
    assert shell.run_cell("print('next')").error_in_exec is None  # not said again


def test_an_import_holding_a_module_the_imports_ahead_need_does_not_wait_for_them(
    _session_shell: InteractiveShell,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """This thread imports ``gm_held`` (its lock held) and, once the imports ahead wait for that lock, imports a
    new module: waiting for them then would never end, so it goes on at once (no line said, no wait)."""
    monkeypatch.syspath_prepend(str(tmp_path))
    held_now = tmp_path / "held.now"  # this thread holds gm_held's lock: the imports ahead may ask for it
    (tmp_path / "gm_ahead_needs_held.py").write_text(
        "import pathlib, time\n"
        "deadline = time.monotonic() + 60\n"
        f"while not pathlib.Path({str(held_now)!r}).exists() and time.monotonic() < deadline:\n"
        "    time.sleep(0.02)\n"
        "import gm_held\n"
    )
    (tmp_path / "gm_new_module.py").write_text("")
    (tmp_path / "gm_held.py").write_text(
        "import threading, time\n"
        "from importlib import _bootstrap\n"
        "from gpu_magics.cluster.background import ahead\n"
        "if threading.current_thread() is threading.main_thread():\n"
        f"    open({str(held_now)!r}, 'w').close()\n"
        "    deadline = time.monotonic() + 60\n"
        "    while not ahead._waits_for_us(ahead._thread) and time.monotonic() < deadline:\n"
        "        time.sleep(0.02)\n"
        "    import gm_new_module\n"
        "    still = ahead.importing()\n"
    )
    monkeypatch.setattr(ahead, "KERNEL_MODULES", ("gm_ahead_needs_held",))
    monkeypatch.setattr(ahead, "GPU_MODULES", ())
    monkeypatch.setattr(ahead, "DASHBOARD_MODULES", ())
    monkeypatch.setattr(ahead, "IMPORT_WAIT_S", 5.0)
    monkeypatch.setattr(ahead, "_thread", None)
    monkeypatch.setattr(ahead, "_said", False)

    before = builtins.__import__
    ahead.import_after_this_cell(_session_shell)
    assert ahead._after_cell is not None
    ahead._after_cell()  # the %load_ext cell ends: the imports begin
    thread = ahead._thread
    assert thread is not None
    try:
        held = importlib.import_module("gm_held")  # takes gm_held's lock without the gate in front
        assert held.still  # it went on while the imports ahead still waited for it
        assert ahead.WAITING_LINE not in capsys.readouterr().out
    finally:
        thread.join(60)
    assert not thread.is_alive() and builtins.__import__ is before  # put back once they were done
