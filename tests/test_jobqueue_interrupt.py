"""dask-jobqueue's ``runner`` module sets a SIGINT handler at import that exits the process (``sys.exit``): in a
notebook, the stop button would then end the cell that imported it with a ``SystemExit``. ``%gpucluster --slurm``
imports it keeping the handler the kernel had."""

from __future__ import annotations

import importlib
import signal
import sys
from collections.abc import Iterator

import pytest

from gpu_magics.cluster.managers.slurm import manager

pytest.importorskip("dask_jobqueue")


@pytest.fixture
def fresh_jobqueue(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """dask-jobqueue not imported yet (its modules come back as they were after the test), under the handler a
    kernel's cell runs with."""
    for name in [name for name in sys.modules if name == "dask_jobqueue" or name.startswith("dask_jobqueue.")]:
        monkeypatch.delitem(sys.modules, name)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def test_a_plain_import_of_dask_jobqueue_replaces_the_interrupt_handler(fresh_jobqueue: None) -> None:
    importlib.import_module("dask_jobqueue.slurm")  # what the package must not do: upstream's behaviour, pinned
    assert signal.getsignal(signal.SIGINT) is not signal.default_int_handler


def test_the_slurm_manager_imports_dask_jobqueue_keeping_the_interrupt_handler(fresh_jobqueue: None) -> None:
    manager._jobqueue_slurm()
    assert "dask_jobqueue.slurm" in sys.modules
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
