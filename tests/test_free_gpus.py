"""Choosing the free GPUs on simulated ones: ``%gpucluster --gpus free[:N]`` and ``%%gpurun gpu --device free``.

The GPUs come from fake NVML specs (``tests/data/shared_gpus.json``: GPU 0 busy with another user's job, GPU 1 free,
GPU 2 busy, GPU 3 idle); the choice reads the kernel's own sampler, as it does on real GPUs. What a user relies on:
one line says which GPUs were chosen and why the others were not; UUIDs and MIG instances are chosen as the inventory
names them; the limits are ``%config`` settings; none free (or too few) is a one-line ``UsageError``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output
from traitlets import TraitError

from gpu_magics import gpus
from gpu_magics.gpus import GpuDevice
from gpu_magics.monitor import fake_pools
from gpu_magics.monitor.availability import FreeRule, assess, rank
from gpu_magics.monitor.fake import FakeSource
from gpu_magics.monitor.models import Snapshot
from gpu_magics.monitor.sampler import Sampler, shutdown_sampler

DATA = Path(__file__).parent / "data"
SHARED = DATA / "shared_gpus.json"
GIB = 2**30
UUIDS = [f"GPU-5a4e0000-0000-0000-0000-00000000000{i}" for i in range(4)]


@pytest.fixture(autouse=True)
def _forget_config(_session_shell: InteractiveShell) -> Iterator[None]:
    """``%config`` merges into the shell's config, which later magics instances read: undo this module's."""
    yield
    for section in ("ClusterMagics", "GpuMagics"):
        for name in ("free_memory", "free_utilization"):
            _session_shell.config[section].pop(name, None)


@pytest.fixture
def source(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Any]:
    """Point the kernel at a fake spec (the shared server by default); the inventory and the sampler follow."""

    def use(spec: Path | dict[str, Any] = SHARED, visible: str | None = None) -> None:
        if isinstance(spec, dict):
            path = tmp_path / "spec.json"
            path.write_text(json.dumps(spec))
            spec = path
        monkeypatch.setenv("GPU_MAGICS_SOURCE", f"fake:{spec}")
        if visible is None:
            monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
        else:
            monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
        shutdown_sampler()
        gpus.set_inventory(None)

    monkeypatch.setenv("GPU_MAGICS_RUNTIME_DIR", str(tmp_path / "runtime"))
    previous = gpus.set_inventory(None)
    try:
        yield use
    finally:
        shutdown_sampler()
        fake_pools.device_memory().release()  # the clusters it started left this process's simulated pools
        gpus.set_inventory(previous)


def gpucluster(ip: InteractiveShell, line: str) -> str:
    """Run ``%gpucluster line`` on the simulated GPUs (a cluster of one CPU worker per chosen GPU starts, then
    stops); returns the choice's line, as it printed it."""
    try:
        with capture_output() as captured:
            ip.run_line_magic("gpucluster", line)
    finally:
        ip.run_line_magic("gpucluster", "stop")
    said = [text for text in captured.stdout.splitlines(keepends=True) if text.startswith("%gpucluster --gpus")]
    return "".join(said)


# -- the judgement, on snapshots of the shared server ---------------------------------------------


def snapshots(count: int = 3, **fake: Any) -> list[Snapshot]:
    sampler = Sampler(FakeSource(spec=SHARED, tick_seconds=None, **fake))
    fake_nvml = sampler.source.nvml  # type: ignore[attr-defined]
    taken = []
    for _ in range(count):
        taken.append(sampler.tick())
        fake_nvml.advance()
    sampler.close()
    return taken


def test_free_means_little_memory_and_seldom_busy_over_the_samples() -> None:
    devices = [GpuDevice(i, "NVIDIA H200", None, uuid=uuid) for i, uuid in enumerate(UUIDS)]
    judged = assess(devices, snapshots(), FreeRule(memory=0.1, utilization=10))
    assert [a.free for a in judged] == [False, True, False, True]
    busy = judged[0]
    assert busy.busy_memory and busy.busy_utilization and busy.memory_used == 40 * GIB
    assert busy.utilization == pytest.approx(97.0) and busy.samples == 3
    assert judged[2].busy_utilization and judged[2].busy_memory  # 20 GiB of 140 is over 10%
    assert [a.index for a in rank(judged)] == [3, 1]  # idle GPU 3 is freer than GPU 1 (1% busy)
    looser = assess(devices, snapshots(), FreeRule(memory=0.5, utilization=100))
    assert all(a.free for a in looser)


def test_memory_of_excluded_processes_does_not_count_and_this_kernel_s_is_told_apart() -> None:
    taken = snapshots()
    devices = [GpuDevice(0, "NVIDIA H200", None, uuid=UUIDS[0])]
    judged = assess(devices, taken, FreeRule(), exclude={4242})
    assert judged[0].memory_used == 40 * GIB - 42412802048 and judged[0].busy_utilization
    mine = assess(devices, taken, FreeRule(), me=4242)
    assert mine[0].mine == 42412802048 and mine[0].memory_used == 40 * GIB


def test_a_gpu_that_cannot_be_read_is_never_free() -> None:
    spec = json.loads(SHARED.read_text())
    spec["gpus"][3]["lost_at_tick"] = 1
    sampler = Sampler(FakeSource(spec=spec, tick_seconds=None))
    taken = [sampler.tick()]
    sampler.source.nvml.advance()  # type: ignore[attr-defined]
    taken.append(sampler.tick())
    sampler.close()
    devices = [GpuDevice(3, "NVIDIA H200", None, uuid=UUIDS[3])]
    [judged] = assess(devices, taken, FreeRule())
    assert not judged.free and judged.error == "GPU is lost"


# -- %gpucluster --gpus free -----------------------------------------------------------------------


@pytest.mark.slow  # starts a cluster of the chosen simulated GPUs
def test_gpus_free_says_which_gpus_and_why_not_the_others(ip: InteractiveShell, source: Any) -> None:
    source()
    said = gpucluster(ip, "--gpus free")
    assert said.count("\n") == 1
    assert said.startswith("%gpucluster --gpus free: chose GPU 1, 3, free (at most 10% of memory in use and 10% busy")
    assert "not GPU 0: 40.0 GiB of 140 GiB in use, 9" in said and "% busy; GPU 2: 20.0 GiB of 140 GiB in use" in said
    one = gpucluster(ip, "--gpus free:1")
    assert one.startswith("%gpucluster --gpus free:1: chose GPU 3, free") and "; GPU 1 free too;" in one


def test_too_few_or_no_free_gpus_is_a_one_line_usage_error(ip: InteractiveShell, source: Any) -> None:
    source()
    with pytest.raises(UsageError) as caught:
        ip.run_line_magic("gpucluster", "--gpus free:3")
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith("%gpucluster --gpus free:3: only GPU 1, 3 free, 3 asked (at most 10% of memory")
    assert "GPU 0: 40.0 GiB of 140 GiB in use" in message
    assert "raise the limits with %config ClusterMagics.free_memory (or free_utilization), or name the GPUs" in message
    busy = json.loads(SHARED.read_text())
    busy["gpus"] = busy["gpus"][:1] + busy["gpus"][2:3]
    source(busy)
    with pytest.raises(UsageError, match=r"^%gpucluster --gpus free: no GPU is free \(at most 10%") as caught:
        ip.run_line_magic("gpucluster", "--gpus free")
    assert "\n" not in str(caught.value)
    source({"init_error": "LibraryNotFound", "gpus": []})
    with pytest.raises(UsageError, match=r"--gpus free: no GPU to choose from \(no NVIDIA driver is installed here"):
        ip.run_line_magic("gpucluster", "--gpus free")


@pytest.mark.slow  # starts a cluster of the chosen simulated GPUs
def test_the_limits_are_config_settings(ip: InteractiveShell, source: Any) -> None:
    source()
    magics = ip.magics_manager.registry["ClusterMagics"]
    try:
        ip.run_line_magic("config", "ClusterMagics.free_memory = 0.2")
        ip.run_line_magic("config", "ClusterMagics.free_utilization = 100")
        said = gpucluster(ip, "--gpus free")
    finally:  # the shell's config outlives this test: the next %load_ext would take these values
        for name in ("free_memory", "free_utilization"):
            ip.config.ClusterMagics.pop(name, None)
            setattr(magics, name, type(magics).class_traits()[name].default_value)
    assert "chose GPU 0, 1, 2, 3" not in said and "chose GPU 1, 2, 3, free (at most 20% of memory" in said
    with pytest.raises(TraitError, match=r"free_memory is a share of a GPU's memory, from 0 to 1 \(like 0.1\), not 2"):
        magics.free_memory = 2
    with pytest.raises(TraitError, match="free_utilization is a percentage, from 0 to 100"):
        magics.free_utilization = -1


@pytest.mark.slow  # starts a cluster of the chosen simulated GPUs
def test_gpus_named_by_uuid_are_chosen_by_their_own_index(ip: InteractiveShell, source: Any) -> None:
    source(visible=f"{UUIDS[3]},{UUIDS[0]},{UUIDS[1]}")
    devices = gpus.inventory().devices()
    assert [d.uuid for d in devices] == [UUIDS[3], UUIDS[0], UUIDS[1]]
    said = gpucluster(ip, "--gpus free")
    assert said.startswith("%gpucluster --gpus free: chose GPU 0, 2, free") and "not GPU 1: 40.0 GiB" in said


@pytest.mark.slow  # starts a cluster of the chosen simulated GPUs
def test_mig_instances_are_chosen_as_the_inventory_names_them(ip: InteractiveShell, source: Any) -> None:
    spec = json.loads((DATA / "fake_gpus.json").read_text())
    spec["gpus"][2]["mig"][0]["memory_used"] = 15 * GIB  # the 3g.20gb instance is mostly taken
    source(spec, visible="MIG-cccc0001-0000-0000-0000-000000000000,MIG-cccc0002-0000-0000-0000-000000000000")
    said = gpucluster(ip, "--gpus free")
    assert said.startswith("%gpucluster --gpus free: chose GPU 1 (MIG), free")
    assert "not GPU 0 (MIG): 15.0 GiB of 20.0 GiB in use" in said


def test_a_running_cluster_reused_is_not_chosen_again(ip: InteractiveShell, source: Any) -> None:
    """Without --replace the running cluster is used as it is: no choice, no line."""
    from gpu_magics.magics.gpucluster import ClusterMagics

    source()
    magics = ClusterMagics(shell=ip)
    options = magics._choose_free_gpus(__import__("gpu_magics.cluster.options", fromlist=["x"]).parse_cluster_line(""))
    assert options.local.free_gpus is None and options.local.gpus is None
    magics.close()


# -- %%gpurun gpu --device free --------------------------------------------------------------------


def test_device_free_picks_the_freest_gpu_for_the_gpu_backend(ip: InteractiveShell, source: Any) -> None:
    source()
    with capture_output() as captured, pytest.raises(UsageError, match="simulated"):
        ip.run_cell_magic("gpurun", "gpu --device free", "t_ran = True")
    said = captured.stdout
    assert said.startswith("%%gpurun --device free: chose GPU 3, free") and "GPU 1 free too" in said
    assert "t_ran" not in ip.user_ns
    ip.run_line_magic("config", "GpuMagics.free_memory = 0.0")  # GPU 1 holds 512 MiB: not free now
    busy = json.loads(SHARED.read_text())
    busy["gpus"] = busy["gpus"][:3]
    source(busy)
    with pytest.raises(UsageError, match=r"^%%gpurun --device free: no GPU is free \(at most 0% .*%config GpuMagics"):
        ip.run_cell_magic("gpurun", "gpu --device free", "t_ran = True")
    assert "t_ran" not in ip.user_ns


@pytest.mark.slow  # starts a cluster of the chosen simulated GPUs
def test_processes_of_this_kernel_are_told_apart_in_the_reason(ip: InteractiveShell, source: Any) -> None:
    spec = json.loads(SHARED.read_text())
    spec["gpus"][3]["processes"] = [{"pid": "self", "used_memory": 30 * GIB}]
    spec["gpus"][3]["memory_used"] = 30 * GIB
    source(spec)
    said = gpucluster(ip, "--gpus free")
    mine = "GPU 3: 30.0 GiB of 140 GiB in use, 30.0 GiB of it this kernel's: %gpucluster free gives its cache back"
    assert mine in said
