"""Every hint names a command that works on this machine: plain ``%gpucluster`` only with real GPUs, CuPy and
dask-cuda; ``%gpucluster --cpu-workers N`` (the same N, at most the cores) on CPU only and on simulated GPUs."""

from __future__ import annotations

import importlib.machinery
import os
import re
import sys
import types
from pathlib import Path

import pytest
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output

from gpu_magics import gpus
from gpu_magics.cluster.control import queries
from gpu_magics.cluster.records import record as cluster_records
from gpu_magics.gpurun.results import CompareResult
from gpu_magics.text import hints

HINT = re.compile(r"start (?:one|a new cluster) with (%gpucluster(?: --cpu-workers \d+)?)\b")


@pytest.fixture
def no_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gpus, "_inventory", gpus.StaticInventory([], reason="no NVIDIA driver is installed here"))


@pytest.fixture
def simulated(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gpus, "_inventory", gpus.SourceInventory("fake:2"))


def real_gpus(monkeypatch: pytest.MonkeyPatch, *, packages: bool) -> None:
    """Two real-looking GPUs; with ``packages``, CuPy and dask-cuda look installed (found, never imported)."""
    found = [gpus.GpuDevice(i, "NVIDIA H100", 80 * 2**30, cuda_id=str(i)) for i in range(2)]
    monkeypatch.setattr(gpus, "_inventory", gpus.StaticInventory(found))
    for name in ("cupy", "dask_cuda"):
        module = types.ModuleType(name)
        module.__spec__ = importlib.machinery.ModuleSpec(name, None)
        monkeypatch.setitem(sys.modules, name, module if packages else None)


def test_the_cpu_worker_count_is_at_most_the_cores() -> None:
    assert 1 <= hints.cpu_workers() <= (os.cpu_count() or 1)
    assert hints.cpu_workers() == min(2, os.cpu_count() or 1)
    assert hints.cpu_cluster_command() == f"%gpucluster --cpu-workers {hints.cpu_workers()}"


@pytest.mark.usefixtures("no_gpu")
def test_without_a_gpu_hints_name_cpu_workers() -> None:
    assert queries.start_cluster_command() == hints.cpu_cluster_command()


@pytest.mark.usefixtures("simulated")
def test_simulated_gpus_hint_cpu_workers() -> None:
    assert queries.start_cluster_command() == hints.cpu_cluster_command()


def test_real_gpus_hint_plain_gpucluster_only_with_cupy_and_dask_cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    real_gpus(monkeypatch, packages=True)
    assert queries.start_cluster_command() == "%gpucluster"
    real_gpus(monkeypatch, packages=False)
    assert queries.start_cluster_command() == hints.cpu_cluster_command()


@pytest.fixture
def runtime_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv(cluster_records.RUNTIME_DIR_ENV, str(tmp_path))
    return tmp_path


@pytest.fixture(params=["no_gpu", "simulated"])
def machine(request: pytest.FixtureRequest) -> str:
    request.getfixturevalue(request.param)
    return str(request.param)


def status_hint(ip: InteractiveShell) -> str:
    with capture_output() as captured:
        ip.run_line_magic("gpucluster", "status")
    return captured.stdout.strip()


@pytest.mark.usefixtures("machine")
def test_every_no_cluster_hint_names_the_same_command(ip: InteractiveShell, runtime_dir: Path) -> None:
    assert queries.active() is None
    expected = hints.cpu_cluster_command()
    texts = [status_hint(ip)]
    for line, cell in (("multi-gpu", "1"), ("", "1")):
        with pytest.raises(UsageError) as caught:
            if line:
                ip.run_cell_magic("gpurun", line, cell)
            else:
                ip.run_line_magic("gpucluster", "free workers")
        texts.append(str(caught.value))
    with capture_output():
        ip.run_cell_magic("gpurun", "--compare all -q -o t_hint_cmp", "1 + 1")
    comparison = ip.user_ns["t_hint_cmp"]
    assert isinstance(comparison, CompareResult)
    texts.append(str(comparison).splitlines()[-1])
    for text in texts:
        assert [match.group(1) for match in HINT.finditer(text)] == [expected], text
        assert "--cpu-workers N" not in text and "://" not in text, text


@pytest.mark.slow
@pytest.mark.usefixtures("machine")
def test_the_hinted_command_starts_a_cluster_as_printed(ip: InteractiveShell, runtime_dir: Path) -> None:
    match = HINT.search(status_hint(ip))
    assert match is not None
    command = match.group(1)
    try:
        with capture_output():
            ip.run_line_magic("gpucluster", command.removeprefix("%gpucluster").strip())
        current = queries.active()
        assert current is not None
        workers = current.client.scheduler_info(n_workers=-1)["workers"]
        assert len(workers) == hints.cpu_workers()
    finally:
        with capture_output():
            ip.run_line_magic("gpucluster", "stop")
    assert queries.active() is None
