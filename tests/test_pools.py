"""Memory given back, in the kernel, on simulated GPUs: what the kernel holds three ways (arrays, its pool's cache,
its CUDA context) in its own record for the side panel, ``%gpucluster free`` and ``free_pool_after_cell``.

The pools are the fake spec's (``tests/data/shared_gpus.json``: this kernel holds 1 GiB of arrays, 10 GiB cached
and a 512 MiB context on GPU 1), kept in a state file that the fake NVML of every process reads, as a real device
is one for all processes. Nothing here imports CuPy or starts CUDA.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output

from gpu_magics import gpus
from gpu_magics.cluster.background import ahead
from gpu_magics.cluster.records import kernel_report
from gpu_magics.cluster.records import record as records
from gpu_magics.cluster.telemetry import pools
from gpu_magics.gpurun.backends import BackendPlan
from gpu_magics.monitor import fake_pools
from gpu_magics.monitor.fake import FakeSource
from gpu_magics.monitor.fake_pools import FakeDeviceMemory, FakePool
from gpu_magics.monitor.sampler import shutdown_sampler

SHARED = Path(__file__).parent / "data" / "shared_gpus.json"
GIB = 2**30
GPU1 = "GPU-5a4e0000-0000-0000-0000-000000000001"


@pytest.fixture
def shared(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Path]:
    """This process is a kernel on the shared server's simulated GPUs; returns the runtime dir of its record."""
    runtime = tmp_path / "runtime"
    monkeypatch.setenv("GPU_MAGICS_SOURCE", f"fake:{SHARED}")
    monkeypatch.setenv("GPU_MAGICS_RUNTIME_DIR", str(runtime))
    monkeypatch.setenv(fake_pools.STATE_ENV, str(tmp_path / "fake-state.json"))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    shutdown_sampler()
    previous = gpus.set_inventory(None)
    kernel_report.remove()
    try:
        yield runtime
    finally:
        fake_pools.device_memory().release()
        kernel_report.remove()
        kernel_report.kernel_memory(fresh=True)
        shutdown_sampler()
        gpus.set_inventory(previous)


def kernel_records(runtime: Path) -> list[dict[str, object]]:
    """The kernel records written so far, once this kernel's refresh after its last cell is done."""
    assert kernel_report.settle()
    return [json.loads(path.read_text()) for path in sorted(runtime.glob("gpu-magics-kernel-*.json"))]


def test_a_pool_held_in_one_process_is_seen_by_every_process_s_nvml(tmp_path: Path) -> None:
    state = tmp_path / "state.json"
    held = FakeDeviceMemory(state)
    child = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(f"""
            import sys, time
            from gpu_magics.monitor.fake_pools import FakeDeviceMemory, FakePool
            FakeDeviceMemory({str(state)!r}).hold({GPU1!r}, FakePool(2**30, 4 * 2**30, 2**29))
            print("held", flush=True)
            sys.stdin.readline()
        """)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "held"
        assert held.on(GPU1) == {child.pid: FakePool(GIB, 4 * GIB, GIB // 2)}
        source = FakeSource(spec=SHARED, tick_seconds=None)
        source.nvml.memory = held
        readings, _ = source.read(slow=True)
        gpu1 = readings[1]
        assert gpu1.memory_used == GIB // 2 + 5 * GIB + GIB // 2  # the spec's own, plus the pool and context
        assert [(p.pid, p.used_memory) for p in gpu1.processes or ()] == [(child.pid, 5 * GIB + GIB // 2)]
        assert (state.stat().st_mode & 0o777) != 0  # a plain file, written atomically
    finally:
        assert child.stdin is not None
        child.stdin.close()
        child.wait(timeout=30)
    assert held.on(GPU1) == {}  # a process that ended holds nothing
    assert FakeSource(spec=SHARED, tick_seconds=None).read(slow=False)[0][1].memory_used == GIB // 2


def test_without_cupy_nothing_is_read_and_cupy_is_not_imported(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GPU_MAGICS_SOURCE", raising=False)
    assert "cupy" not in sys.modules
    assert pools.pool_on(0, "GPU-x", "kernel") is None
    assert pools.free_on(0, "GPU-x", "kernel") is None
    assert "cupy" not in sys.modules


def test_the_kernel_reports_its_memory_three_ways_after_a_cell(ip: InteractiveShell, shared: Path) -> None:
    ip.run_cell("t_x = 1")
    [report] = kernel_records(shared)
    assert report["pid"] == os.getpid() and report["version"] == records.KERNEL_SCHEMA_VERSION == 2
    [gpu] = report["gpus"]  # type: ignore[misc]
    assert gpu["uuid"] == GPU1 and gpu["label"] == "GPU 1"
    assert (gpu["array_memory"], gpu["cached_memory"], gpu["context_memory"]) == (GIB, 10 * GIB, GIB // 2)
    assert gpu["process_memory"] == GIB + 10 * GIB + GIB // 2  # NVML's figure for this process: all of it
    assert gpu["process_memory_source"] == "fake"
    assert (next(shared.glob("gpu-magics-kernel-*.json")).stat().st_mode & 0o777) == 0o600
    [listed] = records.list_kernel_records()
    assert listed.pid == os.getpid() and listed.gpus[0]["cached_memory"] == 10 * GIB


class StandIn:
    """A GPU array as any library offers one (``__cuda_array_interface__``), on no real device."""

    def __init__(self, size: int, address: int) -> None:
        self.interface = {"shape": (size // 4,), "typestr": "<f4", "data": (address, False), "version": 3}

    @property
    def __cuda_array_interface__(self) -> dict[str, object]:
        return self.interface


def test_the_kernel_s_record_names_what_holds_its_memory(ip: InteractiveShell, shared: Path) -> None:
    """For the side panel's notebook row: the biggest names on the kernel's GPU, each with how to give it back;
    a view of the same memory is not counted again, and a name gone is gone from the next record."""
    ip.user_ns.update(t_weights=StandIn(GIB // 2, 0x7000_0000_0000), t_small=StandIn(2**20, 0x7100_0000_0000))
    ip.user_ns["t_same"] = ip.user_ns["t_weights"]
    try:
        ip.run_cell("t_x = 1")
        [report] = kernel_records(shared)
        [gpu] = report["gpus"]  # type: ignore[misc]
        names = gpu["top_names"]
        assert [(row["name"], row["bytes"], row["give_back"]) for row in names] == [
            ("t_weights", GIB // 2, "del t_weights"),
            ("t_small", 2**20, "del t_small"),
        ]
        assert names[0]["what"] == "StandIn 134217728 <f4"
        del ip.user_ns["t_weights"], ip.user_ns["t_same"]
        ip.run_cell("t_x = 2")
        [report] = kernel_records(shared)
        assert [row["name"] for row in report["gpus"][0]["top_names"]] == ["t_small"]  # type: ignore[index]
    finally:
        for name in ("t_weights", "t_same", "t_small"):
            ip.user_ns.pop(name, None)


def test_the_record_s_search_looks_at_a_container_s_first_items_only(ip: InteractiveShell, shared: Path) -> None:
    """It runs after every cell, holding the GIL: a long list is looked at as far as ``PANEL_ITEMS`` only (the
    biggest arrays at its end are %gpumemory's to find)."""
    from gpu_magics.magics.gpumemory import PANEL_ITEMS

    ip.user_ns["t_batch"] = [StandIn((index + 1) * 2**20, 0x7200_0000_0000 + index * 2**30) for index in range(60)]
    ip.run_cell("t_x = 1")
    [report] = kernel_records(shared)
    names = [row["name"] for row in report["gpus"][0]["top_names"]]  # type: ignore[index]
    assert names == [f"t_batch[{index}]" for index in range(PANEL_ITEMS - 1, PANEL_ITEMS - 6, -1)]


def test_gpucluster_free_gives_the_kernel_s_cache_back(ip: InteractiveShell, shared: Path) -> None:
    ip.run_cell("t_x = 1")
    assert kernel_report.settle()  # the refresh after the cell has read (and so made) the stand-in's pool
    before = FakeSource(spec=SHARED, tick_seconds=None).read(slow=False)[0][1].memory_used
    ahead.wait_for_imports()  # those %load_ext began (else the magic's line says it waits for them first)
    with capture_output() as captured:
        ip.run_line_magic("gpucluster", "free")
    assert captured.stdout.strip() == "%gpucluster free: this kernel gave back 10.0 GiB"
    [gpu] = kernel_records(shared)[0]["gpus"]  # type: ignore[misc]
    assert (gpu["array_memory"], gpu["cached_memory"], gpu["context_memory"]) == (GIB, 0, GIB // 2)
    after = FakeSource(spec=SHARED, tick_seconds=None).read(slow=False)[0][1].memory_used
    assert before - after == 10 * GIB  # the device has it back, as every process's NVML sees
    with capture_output() as captured:
        ip.run_line_magic("gpucluster", "free kernel")
    assert captured.stdout.strip() == "%gpucluster free: this kernel gave back 0 B"


def test_free_without_a_pool_or_a_cluster(ip: InteractiveShell, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPU_MAGICS_SOURCE", "fake:2")
    previous = gpus.set_inventory(None)
    try:
        with capture_output() as captured:
            ip.run_line_magic("gpucluster", "free")
        assert captured.stdout.strip() == "%gpucluster free: this kernel holds no memory pool"
        with pytest.raises(UsageError, match=r"^%gpucluster free workers: no cluster is running: start one"):
            ip.run_line_magic("gpucluster", "free workers")
        with pytest.raises(UsageError, match="choose kernel, workers or all"):
            ip.run_line_magic("gpucluster", "free everything")
    finally:
        gpus.set_inventory(previous)


def test_the_record_goes_when_the_extension_unloads(ip: InteractiveShell, shared: Path) -> None:
    ip.run_cell("t_x = 1")
    assert kernel_records(shared)
    ip.run_line_magic("unload_ext", "gpu_magics")
    try:
        assert kernel_records(shared) == []
        ip.run_cell("t_x = 2")  # no hook any more: no record
        assert kernel_records(shared) == []
    finally:
        ip.run_line_magic("load_ext", "gpu_magics")


def test_free_pool_after_cell_gives_the_cache_back_after_a_gpu_cell(ip: InteractiveShell, shared: Path) -> None:
    """The hook the ``%%gpurun`` magic calls after a cell (a ``gpu`` cell needs a real GPU to run)."""
    magics = ip.magics_manager.registry["GpuMagics"]
    ip.run_cell("t_x = 1")
    gpu_plan = BackendPlan(name="gpu", hardware="1x NVIDIA H200 (GPU 1)", chunk_type="cupy", gpu_indices=(1,))
    cpu_plan = BackendPlan(name="cpu-threads", hardware="2 CPU threads", chunk_type="numpy")
    assert magics.free_pool_after_cell is False  # off by default
    magics._after_cell([gpu_plan], None)
    assert kernel_report.kernel_memory(fresh=True)[0].held.cached == 10 * GIB
    magics.free_pool_after_cell = True
    magics._after_cell([cpu_plan], None)  # a CPU cell leaves the pool alone
    assert kernel_report.kernel_memory(fresh=True)[0].held.cached == 10 * GIB
    magics._after_cell([gpu_plan], None)
    assert kernel_report.kernel_memory(fresh=True)[0].held.cached == 0
    [gpu] = kernel_records(shared)[0]["gpus"]  # type: ignore[misc]
    assert gpu["cached_memory"] == 0


def test_a_cpu_cell_with_free_pool_after_cell_runs_as_before(ip: InteractiveShell, shared: Path) -> None:
    ip.run_line_magic("config", "GpuMagics.free_pool_after_cell = True")
    try:
        ip.run_cell("t_x = 1")
        ip.run_cell_magic("gpurun", "cpu-single -q -o t_r", "t_y = 2")
        assert ip.user_ns["t_y"] == 2
        assert kernel_report.kernel_memory(fresh=True)[0].held.cached == 10 * GIB
    finally:
        ip.config["GpuMagics"].pop("free_pool_after_cell", None)
