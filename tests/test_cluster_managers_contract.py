"""The managers' one contract (``managers.base.ClusterManager``): its required members are abstract, so a manager
that lacks one cannot be made; the contract stays narrow; and making a manager does nothing but keep the line's
choices (no print, no thread, no process, no cluster, no job): ``open`` checks, ``start`` starts."""

from __future__ import annotations

import threading
import types
from typing import Any

import psutil
import pytest
from IPython.utils.capture import capture_output

from gpu_magics.cluster.managers.base import ClusterManager
from gpu_magics.cluster.managers.local.cpu import LocalCpuManager
from gpu_magics.cluster.managers.local.gpu import LocalGpuManager
from gpu_magics.cluster.managers.opening import make_manager
from gpu_magics.cluster.options import parse_cluster_line
from gpu_magics.text.errors import LineError

CONTRACT = {
    # open and check (and whether the line names the running cluster), start, wait for workers (with what the
    # start needs: how many, dask settings, their GPUs)
    "open", "same_as", "start", "await_workers", "expected_workers", "settings", "learn",
    # scale (and its check, said at once), adapt, jobs
    "scale", "check_scale", "adapt", "jobs",
    # the one way to end, with keep or not
    "finish",
    # the facts (item 1 of the views): what every view reads, and the flags they are made from
    "facts", "source", "taken", "title", "owned", "scalable", "background", "keepable", "since", "hardware_note",
    # what the workers are: as asked for, else as they said
    "declared_workers", "workers_kind", "workers_words",
    # what a park gives the GPUs of (the worker processes on this host that this kernel started), why none, and
    # what its lines add (simulated GPUs)
    "park_targets", "why_not_parkable", "park_note", "parks",
}  # fmt: skip
REQUIRED = {"start", "finish", "source", "taken", "title"}


def test_the_required_members_are_abstract_and_the_contract_stays_narrow() -> None:
    assert ClusterManager.__abstractmethods__ == REQUIRED
    public = {name for name in dir(ClusterManager) if not name.startswith("_")}
    assert public == CONTRACT


class Complete(ClusterManager):
    def start(self, options: Any, starting: Any) -> Any:
        raise NotImplementedError

    def finish(self, name: str, keep: bool | None = None) -> str:
        return f"ended {name}"

    @property
    def source(self) -> str:
        return "made in a test"

    @property
    def taken(self) -> str:
        return "taken at"

    @property
    def title(self) -> str:
        return "test"


@pytest.mark.parametrize("missing", sorted(REQUIRED))
def test_a_manager_missing_a_required_member_cannot_be_made(missing: str) -> None:
    members = {name: value for name, value in vars(Complete).items() if name in REQUIRED and name != missing}
    lacking = types.new_class("Lacking", (ClusterManager,), exec_body=lambda body: body.update(members))
    with pytest.raises(TypeError, match=missing):
        lacking(None, None)
    assert Complete(None, None).finish("c") == "ended c"  # with every one it can


def test_a_subclass_that_defines_too_little_cannot_be_made() -> None:
    class OnlyStart(ClusterManager):
        def start(self, options: Any, starting: Any) -> Any:
            raise NotImplementedError

    with pytest.raises(TypeError) as refused:
        OnlyStart(None, None)  # type: ignore[abstract]
    with pytest.raises(TypeError, match="abstract"):
        ClusterManager(None, None)  # type: ignore[abstract]
    for member in REQUIRED - {"start"}:
        assert member in str(refused.value)


LINES = (
    "",  # GPU workers started here
    "--cpu-workers 2",
    "--address tcp://127.0.0.1:9",
    "--slurm --jobs 2 --cpu-workers 1",
    "--gateway http://127.0.0.1:9",
    "--gateway http://127.0.0.1:9 --connect default.abc",
    "--from t_c",
)


@pytest.mark.parametrize("line", LINES)
def test_making_a_manager_has_no_side_effects(line: str) -> None:
    threads = set(threading.enumerate())
    children = {child.pid for child in psutil.Process().children(recursive=True)}
    with capture_output() as captured:
        manager = make_manager(parse_cluster_line(line), {"t_c": object()})
    assert captured.stdout == captured.stderr == "" and not captured.outputs
    assert set(threading.enumerate()) == threads
    assert {child.pid for child in psutil.Process().children(recursive=True)} == children
    assert manager.cluster is None  # nothing made, nothing looked up: open checks, start makes
    assert manager.jobs({}) == ()
    assert getattr(manager, "submitted", set()) == set()  # SLURM: no job submitted
    assert getattr(manager, "gateway", None) is None  # a gateway: no client made, nothing asked


def test_a_manager_that_only_opened_ends_without_a_cluster() -> None:
    manager = make_manager(parse_cluster_line("--cpu-workers 1"), {})
    manager.open()
    assert manager.expected_workers() == 0 and manager.finish("t", keep=True) == "%gpucluster: stopped cluster 't'"


def test_the_local_gpu_and_cpu_cases_are_their_own_classes() -> None:
    gpu, cpu = (make_manager(parse_cluster_line(line), {}) for line in ("", "--cpu-workers 2"))
    assert isinstance(gpu, LocalGpuManager) and isinstance(cpu, LocalCpuManager)
    assert (gpu.title, cpu.title) == ("GPU cluster", "CPU cluster")
    assert (gpu.workers_words, cpu.workers_words) == ("GPU workers", "CPU workers")
    slurm = make_manager(parse_cluster_line("--slurm --cpu-workers 1"), {})
    assert slurm.workers_words == "workers" and slurm.declared_workers == "cpu"  # the start's line as it was
    assert gpu.same_as(cpu, None) and cpu.same_as(gpu, None)  # a line naming one while the other runs uses it
    assert not cpu.same_as(make_manager(parse_cluster_line("--address tcp://127.0.0.1:9"), {}), None)
    cpu.check_scale(1, "scale")
    with pytest.raises(LineError, match="may use 0 GPU"):  # no GPU chosen: ``open`` chooses them
        gpu.check_scale(1, "scale")


GPU_SEEN = {"w0": {"gpu_name": "H200", "cupy": True}}
NO_CUPY = {"w0": {"gpu_name": "H200", "cupy": False}}  # a GPU its chunks cannot use
CPU_SEEN = {"w0": {"gpu_name": None}}
DECLARED = {
    "": "gpu",
    "--cpu-workers 2": "cpu",
    "--slurm --jobs 2 --cpu-workers 1": "cpu",  # CPU workers, whatever GPUs the node has
    "--slurm --gpus-per-job 2": None,
    "--address tcp://127.0.0.1:9": None,
    "--gateway http://127.0.0.1:9": None,
    "--from t_c": None,
}


@pytest.mark.parametrize(("line", "declared"), DECLARED.items())
def test_what_the_workers_are_by_how_they_were_asked_for(line: str, declared: str | None) -> None:
    manager = make_manager(parse_cluster_line(line), {})
    assert manager.declared_workers == declared
    said: dict[str, dict[str, dict[str, Any]]] = {"gpu": GPU_SEEN, "no cupy": NO_CUPY, "cpu": CPU_SEEN, "nothing": {}}
    kinds = {what: manager.workers_kind(devices) for what, devices in said.items()}
    if declared is None:
        assert kinds == {"gpu": "gpu", "no cupy": "cpu", "cpu": "cpu", "nothing": "cpu"}
    else:
        assert set(kinds.values()) == {declared}
