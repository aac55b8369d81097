"""NvmlSource against the fake NVML binding: fields, units, failures, CUDA_VISIBLE_DEVICES, MIG."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gpu_magics.monitor import GpuReading, NvmlSource, make_source
from gpu_magics.monitor.fake import ERRORS, FakeNvml, FakeSource, demo_spec, load_spec

SPEC_PATH = Path(__file__).parent / "data" / "fake_gpus.json"
UUID0 = "GPU-aaaa1111-0000-0000-0000-000000000000"
UUID1 = "GPU-aaaa2222-0000-0000-0000-000000000000"
UUID2 = "GPU-bbbb3333-0000-0000-0000-000000000000"
UUID3 = "GPU-dddd4444-0000-0000-0000-000000000000"
MIG_A = "MIG-cccc0001-0000-0000-0000-000000000000"
MIG_B = "MIG-cccc0002-0000-0000-0000-000000000000"


def source_for(spec: Any = SPEC_PATH, visible: str | None = None) -> tuple[NvmlSource, FakeNvml]:
    nvml = FakeNvml(spec)
    return NvmlSource(nvml, visible_devices=visible), nvml


def uuids(readings: tuple[GpuReading, ...]) -> list[str]:
    return [r.uuid for r in readings]


def test_import_does_no_nvml_work() -> None:
    code = (
        "import sys\n"
        "import gpu_magics.monitor as m\n"
        "m.make_source('nvml'); m.Sampler(m.make_source('nvml'))\n"
        "assert 'pynvml' not in sys.modules, 'pynvml imported'\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr


def test_reads_every_field_in_reading_units() -> None:
    source, _ = source_for()
    gpus, status = source.read(slow=True)
    assert status is None
    g = gpus[0]
    assert (g.index, g.nvml_index, g.name, g.uuid) == (0, 0, "NVIDIA H200", UUID0)
    assert g.memory_total == 150754820096 and g.memory_used == 2**30
    assert (g.gpu_util, g.memory_util, g.temperature) == (10.0, 20.0, 41.0)
    assert g.power == pytest.approx(312.5) and g.power_limit == pytest.approx(700.0)
    assert g.sm_clock == 1980
    assert g.pcie_rx == pytest.approx(1048576000) and g.pcie_tx == pytest.approx(524288000)
    # compute and graphics lists merged by pid; the known memory wins over None
    assert [(p.pid, p.used_memory) for p in g.processes or ()] == [(99, None), (1234, 2**30)]
    assert g.error is None and g.mig_parent is None


def test_fast_read_skips_slow_fields_and_their_calls() -> None:
    source, nvml = source_for()
    gpus, _ = source.read(slow=False)
    assert all(g.pcie_rx is None and g.nvlink_rx is None and g.processes is None for g in gpus)
    assert gpus[0].memory_used == 2**30
    assert nvml.calls["nvmlDeviceGetPcieThroughput"] == 0
    assert nvml.calls["nvmlDeviceGetFieldValues"] == 0
    assert nvml.calls["nvmlDeviceGetComputeRunningProcesses"] == 0


def test_nvml_starts_once_and_again_after_close() -> None:
    source, nvml = source_for()
    for _ in range(5):
        source.read(slow=False)
    assert nvml.calls["nvmlInit"] == 1 and nvml.initialized == 1
    source.close()
    assert nvml.initialized == 0
    source.read(slow=False)
    assert nvml.calls["nvmlInit"] == 2


def test_values_follow_ticks() -> None:
    source, nvml = source_for()
    seen = []
    for _ in range(4):
        gpus, _ = source.read(slow=False)
        seen.append((gpus[0].memory_used, gpus[0].gpu_util, gpus[1].memory_used))
        nvml.advance()
    assert [s[0] for s in seen] == [2**30, 2**31, 2**32, 2**30]  # a list cycles
    assert [s[1] for s in seen] == [10.0, 50.0, 90.0, 10.0]
    assert [s[2] for s in seen] == [0, 50000000000, 100000000000, 50000000000]  # a wave


def test_nvlink_rate_from_counter_deltas() -> None:
    source, nvml = source_for()
    first, _ = source.read(slow=True)
    assert first[0].nvlink_rx is None  # one counter value is not a rate yet
    nvml.advance()
    second, _ = source.read(slow=True)
    assert second[0].nvlink_rx == pytest.approx(102400000000, rel=1e-6)
    assert second[0].nvlink_tx == pytest.approx(51200000000, rel=1e-6)
    again, _ = source.read(slow=True)  # same counter timestamp: keep the last rate
    assert again[0].nvlink_rx == second[0].nvlink_rx
    assert second[1].nvlink_rx is None  # no NVLink on this GPU


def test_unsupported_fields_are_none() -> None:
    source, _ = source_for()
    t4 = source.read(slow=True)[0][-1]
    assert t4.uuid == UUID3 and t4.error is None
    assert t4.temperature is None and t4.power is None and t4.sm_clock is None
    assert t4.pcie_rx is None and t4.nvlink_rx is None
    assert t4.processes is None  # NoPermission on a field: None, the GPU stays readable
    assert t4.memory_total == 16106127360


def test_whole_nvlink_call_failing_is_none() -> None:
    spec = {"gpus": [{"nvlink_rx": "!FunctionNotFound", "nvlink_tx": 1.0}]}
    gpus, status = source_for(spec)[0].read(slow=True)
    assert status is None and gpus[0].nvlink_rx is None and gpus[0].error is None


@pytest.mark.parametrize(
    ("error", "reason"),
    [
        ("LibraryNotFound", "no NVIDIA driver is installed here"),
        ("DriverNotLoaded", "the NVIDIA driver is not loaded"),
        ("NoPermission", "no permission to read the GPUs (NVML refused)"),
        ("Unknown", "NVML initialization failed: "),
    ],
)
def test_nvml_that_cannot_start_gives_a_reason(error: str, reason: str) -> None:
    """Plain words for the failures a user can act on (no NVML jargon such as "Shared Library Not Found")."""
    source, nvml = source_for({"init_error": error, "gpus": [{}]})
    for _ in range(3):
        gpus, status = source.read(slow=True)
        assert gpus == ()
        assert status is not None and status.startswith(reason)
        assert (str(ERRORS[error]()) in status) == (error == "Unknown")
        assert "Shared Library" not in status and "NVML library" not in status
    assert nvml.calls["nvmlInit"] == 1  # not retried on every read
    source.close()
    assert nvml.calls["nvmlShutdown"] == 0  # it never started


def test_missing_pynvml_gives_a_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # makes `import pynvml` fail
    gpus, status = NvmlSource().read(slow=False)
    assert gpus == () and status is not None and "nvidia-ml-py" in status


def test_real_nvml_never_raises() -> None:
    source = NvmlSource()
    try:
        gpus, status = source.read(slow=True)
    finally:
        source.close()
    assert status is not None or gpus  # either GPUs or the reason there are none


def test_no_gpu_found() -> None:
    gpus, status = source_for({"gpus": []})[0].read(slow=False)
    assert gpus == () and status == "no NVIDIA GPU found"


def test_no_permission_on_one_gpu_leaves_the_others() -> None:
    spec = load_spec(SPEC_PATH)
    spec["gpus"][1]["handle_error"] = "NoPermission"
    gpus, status = source_for(spec)[0].read(slow=True)
    assert status is None
    broken = gpus[1]
    assert broken.error == "Insufficient Permissions" and broken.nvml_index == 1
    assert broken.memory_used is None and broken.processes is None
    assert gpus[0].error is None and gpus[0].memory_used == 2**30
    assert gpus[-1].error is None


def test_gpu_lost_mid_run_leaves_the_others() -> None:
    spec = load_spec(SPEC_PATH)
    spec["gpus"][1]["lost_at_tick"] = 2
    source, nvml = source_for(spec)
    before, _ = source.read(slow=True)
    assert before[1].error is None
    nvml.advance(2)
    for slow in (False, True):
        after, status = source.read(slow=slow)
        assert status is None
        lost = after[1]
        assert lost.error == "GPU is lost"
        assert (lost.index, lost.name, lost.uuid) == (1, "NVIDIA H200", UUID1)  # still identifiable
        assert lost.memory_used is None and lost.gpu_util is None
        assert after[0].error is None and after[0].memory_used is not None
        assert after[-1].error is None
    assert len(after) == len(before)


def test_gpu_lost_before_start_is_listed_with_its_error() -> None:
    spec = {"gpus": [{"uuid": "GPU-1"}, {"uuid": "GPU-2", "lost_at_tick": 0}]}
    gpus, status = source_for(spec)[0].read(slow=False)
    assert status is None
    assert [g.error for g in gpus] == [None, "GPU is lost"]


def test_mig_instances_are_devices() -> None:
    gpus, _ = source_for()[0].read(slow=True)
    assert uuids(gpus) == [UUID0, UUID1, MIG_A, MIG_B, UUID3]
    assert [g.index for g in gpus] == [0, 1, 2, 3, 4]
    mig_a, mig_b = gpus[2], gpus[3]
    assert mig_a.mig_parent == UUID2 and mig_a.nvml_index == 2
    assert mig_a.name.endswith("MIG 3g.20gb")
    assert mig_a.memory_total == 20 * 2**30 and mig_a.memory_used == 2**30
    assert mig_a.gpu_util is None and mig_a.temperature is None and mig_a.pcie_rx is None
    assert mig_b.processes is not None and [p.pid for p in mig_b.processes] == [777]


@pytest.mark.parametrize(
    ("visible", "expected"),
    [
        ("0", [UUID0]),
        ("3,0", [UUID3, UUID0]),  # order is the user's
        ("1, 0", [UUID1, UUID0]),
        (UUID1, [UUID1]),
        ("GPU-aaaa2", [UUID1]),  # a unique prefix
        ("gpu-AAAA2222", [UUID1]),  # case does not matter
        (f"{UUID3},1", [UUID3, UUID1]),
        ("2", [MIG_A, MIG_B]),  # a MIG-enabled GPU shows its instances
        ("GPU-bbbb", [MIG_A, MIG_B]),
        ("MIG-cccc0002", [MIG_B]),
        (f"{MIG_B},0", [MIG_B, UUID0]),
        (f"MIG-{UUID2}/5/0", [MIG_B]),  # the older MIG-GPU-<uuid>/<gi>/<ci> form
    ],
)
def test_cuda_visible_devices_selects_and_orders(visible: str, expected: list[str]) -> None:
    gpus, status = source_for(visible=visible)[0].read(slow=False)
    assert status is None
    assert uuids(gpus) == expected
    assert [g.index for g in gpus] == list(range(len(expected)))  # indices are the user's view


@pytest.mark.parametrize(
    ("visible", "expected", "why"),
    [
        ("0,7,1", [UUID0], "'7' is not the index of a GPU"),
        ("0,-1,1", [UUID0], "'-1' is not an index"),
        ("1,GPU-ffff", [UUID1], "'GPU-ffff' matches no device"),
        ("GPU-aaaa", [], "'GPU-aaaa' matches more than one device"),
        ("MIG-cccc", [], "matches more than one device"),
        ("0,0", [UUID0], "'0' repeats an earlier entry"),
        ("0,,1", [UUID0], "'' is not an index"),
        ("", [], "CUDA_VISIBLE_DEVICES is empty"),
    ],
)
def test_cuda_visible_devices_invalid_entries(visible: str, expected: list[str], why: str) -> None:
    gpus, status = source_for(visible=visible)[0].read(slow=False)
    assert uuids(gpus) == expected
    assert status is not None and why in status


def test_cuda_visible_devices_read_from_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1,0")
    gpus, _ = NvmlSource(FakeNvml(SPEC_PATH)).read(slow=False)
    assert uuids(gpus) == [UUID1, UUID0]
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    gpus, _ = NvmlSource(FakeNvml(SPEC_PATH)).read(slow=False)
    assert len(gpus) == 5


def test_fake_source_by_name() -> None:
    source = make_source("fake", gpus=8)
    gpus, status = source.read(slow=True)
    assert status is None and len(gpus) == 8
    assert len(set(uuids(gpus))) == 8
    assert all(g.error is None and g.memory_total for g in gpus)
    assert len(make_source("fake").read(slow=False)[0]) == 4


def test_fake_source_from_json_file_and_dict() -> None:
    from_file = make_source("fake", spec=str(SPEC_PATH)).read(slow=False)[0]
    from_dict = FakeSource(json.loads(SPEC_PATH.read_text())).read(slow=False)[0]
    assert uuids(from_file) == uuids(from_dict) == [UUID0, UUID1, MIG_A, MIG_B, UUID3]


def test_fake_source_ignores_environment_and_takes_visible_devices(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    assert len(FakeSource(gpus=3).read(slow=False)[0]) == 3
    assert [g.nvml_index for g in FakeSource(gpus=3, visible_devices="2,1").read(slow=False)[0]] == [2, 1]


def test_bad_source_arguments() -> None:
    with pytest.raises(ValueError, match="unknown GPU source 'cuda'"):
        make_source("cuda")
    with pytest.raises(ValueError, match="not both"):
        make_source("fake", gpus=2, spec={"gpus": []})
    with pytest.raises(ValueError, match="'gpus' list"):
        make_source("fake", spec={"devices": []})
    with pytest.raises(ValueError, match="negative"):
        demo_spec(-1)


def test_readings_serialize_to_json() -> None:
    gpus, _ = source_for()[0].read(slow=True)
    data = json.loads(json.dumps([g.to_json() for g in gpus]))
    assert data[0]["uuid"] == UUID0
    assert data[0]["processes"] == [  # NVML had no utilization sample of either: measured, and 0
        {"pid": 99, "used_memory": None, "sm_util": 0.0},
        {"pid": 1234, "used_memory": 2**30, "sm_util": 0.0},
    ]
    assert data[-1]["processes"] is None
    assert set(data[0]) == {f for f in GpuReading.__dataclass_fields__}


def test_a_crashing_binding_only_fails_its_device() -> None:
    nvml = FakeNvml({"gpus": [{"uuid": "GPU-1"}, {"uuid": "GPU-2"}]})

    def explode() -> None:
        raise ZeroDivisionError("binding bug")

    source = NvmlSource(nvml, visible_devices=None)
    source.read(slow=False)
    nvml.hooks["nvmlDeviceGetMemoryInfo"] = explode  # not an NVML error: the field reads as None
    gpus, status = source.read(slow=False)
    assert status is None and all(g.error is None and g.memory_used is None for g in gpus)
    assert all(g.gpu_util == 0.0 for g in gpus)


def test_simulated_gpus_read_the_same_in_every_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """The server, a kernel and its workers each simulate the GPUs: begun at different moments, they read the same
    figures at the same moment, as processes reading one real GPU do."""
    import time

    monkeypatch.setattr(time, "time", lambda: 1_800_000_000.25)  # one moment, read by both
    server, kernel = FakeSource(gpus=2, tick_seconds=1.0), FakeSource(gpus=2, tick_seconds=1.0)
    kernel.nvml._start -= 37.0  # type: ignore[attr-defined]  # began 37 s before the other
    read = [[(g.memory_used, g.gpu_util) for g in source.read(slow=False)[0]] for source in (server, kernel)]
    assert read[0] == read[1]


def test_process_lists_read_apart_agree_with_a_full_read() -> None:
    """A source without ``read_processes`` (a custom one) gives the same process lists through its full read."""
    from gpu_magics.monitor.models import process_lists

    class OnlyRead:  # the GpuSource protocol alone
        def __init__(self, source: FakeSource) -> None:
            self.source = source

        def read(self, *, slow: bool) -> tuple[tuple[GpuReading, ...], str | None]:
            return self.source.read(slow=slow)

        def close(self) -> None:
            self.source.close()

    spec = demo_spec(4)
    apart, full = process_lists(FakeSource(spec)), process_lists(OnlyRead(FakeSource(spec)))
    assert apart == full
    assert any(processes for processes in apart.values())  # the demo lists processes: the comparison says something


def test_each_process_s_share_of_the_gpu_s_time_where_nvml_measures_it_and_none_where_it_cannot() -> None:
    """Read with the process list: NVML's samples since the last read, by pid; a process without a sample ran
    nothing (0); a GPU that cannot say (a vGPU, a MIG slice) gives every process ``None``, never 0."""
    spec = {
        "gpus": [
            {"name": "H200", "processes": [{"pid": 10, "used_memory": 1, "sm_util": [80, 60]},
                                           {"pid": 11, "used_memory": 1}]},
            {"name": "H200", "processes": [{"pid": 12, "used_memory": 1, "sm_util": 50}],
             "process_util": "!NotSupported"},
            {"name": "A100", "mig": [{"name": "A100 MIG 3g.20gb", "processes": [{"pid": 13, "used_memory": 1}]}]},
        ]
    }  # fmt: skip
    source = FakeSource(spec, tick_seconds=None)
    gpus, _ = source.read(slow=True)
    shares = {p.pid: p.sm_util for g in gpus for p in g.processes or ()}
    assert shares == {10: 80.0, 11: 0.0, 12: None, 13: None}
    source.nvml.advance()  # the next samples
    gpus, _ = source.read(slow=True)
    assert [p.sm_util for p in gpus[0].processes or ()] == [60.0, 0.0]
    assert [p.to_json() for p in gpus[1].processes or ()] == [{"pid": 12, "used_memory": 1, "sm_util": None}]


def test_a_process_s_own_report_reads_the_process_list_without_the_time_samples() -> None:
    """``read_processes`` (a kernel's or worker's report of its own memory, often) asks NVML for the process list
    only; the samples are the slow read's, per GPU, each from where that GPU's last read ended."""
    spec = {"gpus": [{"name": "H200", "processes": [{"pid": 10, "used_memory": 1, "sm_util": 40}]}] * 2}
    source = FakeSource(spec, tick_seconds=None)
    listed = source.read_processes()
    assert [p.sm_util for processes in listed.values() for p in processes or ()] == [None, None]
    assert source.nvml.calls["nvmlDeviceGetProcessUtilization"] == 0
    gpus, _ = source.read(slow=True)
    assert [p.sm_util for g in gpus for p in g.processes or ()] == [40.0, 40.0]
    assert source.nvml.calls["nvmlDeviceGetProcessUtilization"] == 2
