"""The JSON the server sends has exactly the fields that ``labextension/src/types.ts`` declares.

The Python side comes from real objects: the monitor's dataclasses, a snapshot read from a fake GPU source, and
the replies of the REST handlers' own code (run on a stand-in request) for the config, clusters and GPU memory
holders. The TypeScript side comes from parsing ``types.ts``. Also: one version, from ``labextension/package.json``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import importlib.metadata
import inspect
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from packaging.version import Version

import gpu_magics
from gpu_magics.monitor.fake import FakeSource
from gpu_magics.monitor.sampler import Sampler
from gpu_magics.server import handlers
from gpu_magics.server.config import GpuMagicsServer
from gpu_magics.server.ownership.owners import GpuHolder
from gpu_magics.server.service import MonitorService

try:
    from gpu_magics.monitor.models import GpuProcess, GpuReading, HostReading, Snapshot
except ImportError:  # before the monitor's models moved to their own module
    from gpu_magics.monitor.source import GpuProcess, GpuReading, HostReading, Snapshot

try:
    from gpu_magics.cluster.records.record import ClusterRecord, write_record
except ImportError:  # before the cluster modules moved into a package
    from gpu_magics.cluster_records import ClusterRecord, write_record

ROOT = Path(__file__).resolve().parent.parent
TYPES_TS = ROOT / "labextension" / "src" / "types.ts"
PACKAGE_JSON = ROOT / "labextension" / "package.json"
DISTRIBUTION = "gpu-magics"

# -- the TypeScript side ---------------------------------------------------------------------------------------

_COMMENT = re.compile(r"/\*.*?\*/|(?<![:\w])//[^\n]*", re.S)
_INTERFACE = re.compile(r"\binterface\s+(\w+)(?:\s*<[^{]*>)?(?:\s+extends\s+[^{]+)?\s*\{")
_MEMBER = re.compile(r"\s*(?:readonly\s+)?(?:(\w+)|'([^']+)'|\"([^\"]+)\")\s*\??\s*:")


def ts_interfaces(source: str) -> dict[str, list[str]]:
    """Interface name -> its field names, in order; optional (``?``) fields count; nested types do not."""
    source = _COMMENT.sub("", source)
    found: dict[str, list[str]] = {}
    for match in _INTERFACE.finditer(source):
        body, depth, end = [], 1, match.end()
        while depth:
            if end >= len(source):
                raise ValueError(f"interface {match.group(1)} is not closed")
            char = source[end]
            depth += {"{": 1, "}": -1}.get(char, 0)
            body.append(char)
            end += 1
        found[match.group(1)] = _members("".join(body[:-1]))
    return found


def _members(body: str) -> list[str]:
    """The names of the members at the top level of an interface body (split at ``;`` and line ends)."""
    names, depth, start = [], 0, 0
    for index, char in enumerate(body + ";"):
        if char in "{([<":
            depth += 1
        elif char in "})]>" and body[index - 1 : index + 1] != "=>":
            depth -= 1
        elif char in ";\n," and depth == 0:
            member = _MEMBER.match(body[start:index])
            if member:
                names.append(next(name for name in member.groups() if name))
            start = index + 1
    return names


@pytest.fixture(scope="module")
def ts() -> dict[str, list[str]]:
    return ts_interfaces(TYPES_TS.read_text(encoding="utf-8"))


def assert_same_fields(python: Any, interface: str, ts: dict[str, list[str]]) -> None:
    """``python`` (field or key names) and the TypeScript interface name the same fields, each once."""
    assert interface in ts, f"no interface {interface} in {TYPES_TS.name}"
    names = list(python)
    assert len(names) == len(set(names)), f"repeated names on the Python side: {names}"
    assert len(ts[interface]) == len(set(ts[interface])), f"repeated names in {interface}: {ts[interface]}"
    only_python = sorted(set(names) - set(ts[interface]))
    only_ts = sorted(set(ts[interface]) - set(names))
    assert not only_python and not only_ts, (
        f"{interface}: sent by the server but not declared: {only_python}; declared but not sent: {only_ts}"
    )


def field_names(cls: type) -> list[str]:
    return [field.name for field in dataclasses.fields(cls)]


def test_the_parser_reads_interfaces() -> None:
    source = """
    /** Docs with { braces } and // slashes. */
    export interface IOuter extends IBase {
      id: number; // a comment: not: a field
      readonly 'quoted-name'?: string;
      nested: { inner: number; other: string } | null;
      callback: (value: number) => void;
      generic: Map<string, { deep: boolean }>;
      url: 'http://example.com';
      optional?: string[]
    }
    interface IEmpty {}
    type NotAnInterface = { skipped: number };
    """
    assert ts_interfaces(source) == {
        "IOuter": ["id", "quoted-name", "nested", "callback", "generic", "url", "optional"],
        "IEmpty": [],
    }


# -- the Python side: what the server sends --------------------------------------------------------------------


@dataclasses.dataclass
class Replies:
    devices: dict[str, Any]
    clusters: dict[str, Any]
    processes: dict[str, Any]


def _stand_in(handler_class: type[handlers.GpuMagicsHandler], service: MonitorService) -> Any:
    """A handler of ``handler_class`` with no request behind it: no kernels, no sessions; keeps what it sends."""

    class Kernels:
        """The server's kernel manager, as far as the handlers ask it: it runs the kernel of the record."""

        def list_kernel_ids(self) -> list[str]:
            return ["kernel-1"]

        def get_kernel(self, kernel_id: str) -> Any:
            raise KeyError(kernel_id)

    class StandIn(handler_class):
        kernel_manager = Kernels()
        session_manager = None
        base_url = "/"

        def __init__(self) -> None:  # no tornado application or request
            self.sent: list[Any] = []

        @property
        def service(self) -> MonitorService:
            return service

        def set_header(self, name: str, value: Any) -> None:
            pass

        def finish(self, chunk: Any = None) -> Any:  # the body the handler's own ``reply`` wrote
            self.sent.append(json.loads(chunk))

    return StandIn()


async def _reply(handler_class: type[handlers.GpuMagicsHandler], service: MonitorService) -> dict[str, Any]:
    """Run the ``GET`` of ``handler_class`` (without its login and authorization wrappers)."""
    handler = _stand_in(handler_class, service)
    await inspect.unwrap(handler_class.get)(handler)
    [reply] = handler.sent
    assert isinstance(reply, dict)
    return reply


async def _all_replies(service: MonitorService) -> Replies:
    try:
        await _slow_fields_read(service)
        return Replies(
            devices=await _reply(handlers.DevicesHandler, service),
            clusters=await _reply(handlers.ClustersHandler, service),
            processes=await _reply(handlers.ProcessesHandler, service),
        )
    finally:
        service.close()


async def _slow_fields_read(service: MonitorService, timeout: float = 10.0) -> None:
    """Wait for a snapshot with every GPU's processes (the sampler's slow thread reads them)."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        snapshot = await service.latest()
        if snapshot.gpus and all(gpu.processes is not None for gpu in snapshot.gpus):
            return
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"no snapshot with processes within {timeout} s: {snapshot}")
        await asyncio.sleep(0.05)


@pytest.fixture(scope="module")
def replies(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Replies]:
    """The devices, clusters and processes replies, on two fake GPUs and with one cluster record."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("GPU_MAGICS_RUNTIME_DIR", str(tmp_path_factory.mktemp("runtime")))
        patch.delenv("GPU_MAGICS_SOURCE", raising=False)
        write_record(
            ClusterRecord(
                name="contract",
                scheduler_address="tcp://127.0.0.1:8786",
                dashboard_url="http://127.0.0.1:8787/status",
                kind="cpu",
                workers=2,
                kernel_id="kernel-1",
            )
        )
        write_record(
            ClusterRecord(
                name="elsewhere",
                scheduler_address="tcp://127.0.0.1:8796",
                dashboard_url=None,
                kind="cpu",
                workers=1,
                connection_file="tmpqc6nlsg9.json",
                host="node-2",
            )
        )
        config = GpuMagicsServer(source="fake", fake_gpus=2, interval=0.1, slow_interval=0.1)
        yield asyncio.run(_all_replies(MonitorService(config, idle_timeout=0)))


@pytest.fixture(scope="module")
def snapshot() -> Iterator[Snapshot]:
    """One snapshot of two fake GPUs, slow fields (processes) included."""
    sampler = Sampler(FakeSource(gpus=2, tick_seconds=None))
    try:
        yield sampler.tick()
    finally:
        sampler.close()


# -- the tests -------------------------------------------------------------------------------------------------

MODELS = [
    ("IGpuProcess", GpuProcess, lambda snapshot: snapshot["gpus"][0]["processes"][0]),
    ("IGpuReading", GpuReading, lambda snapshot: snapshot["gpus"][0]),
    ("IHostReading", HostReading, lambda snapshot: snapshot["host"]),
    ("ISnapshot", Snapshot, lambda snapshot: snapshot),
]


@pytest.mark.parametrize(("interface", "model", "part"), MODELS, ids=[m[0] for m in MODELS])
def test_monitor_models_match(
    ts: dict[str, list[str]], snapshot: Snapshot, replies: Replies, interface: str, model: type, part: Any
) -> None:
    assert_same_fields(field_names(model), interface, ts)
    assert_same_fields(part(snapshot.to_json()), interface, ts)
    assert_same_fields(part(replies.devices["snapshot"]), interface, ts)  # what GET devices sends


def test_every_gpu_and_process_has_the_same_fields(snapshot: Snapshot) -> None:
    data = snapshot.to_json()
    assert len(data["gpus"]) == 2
    assert all(gpu["processes"] for gpu in data["gpus"]), "the fake GPUs should have processes"
    assert len({tuple(gpu) for gpu in data["gpus"]}) == 1
    assert len({tuple(p) for gpu in data["gpus"] for p in gpu["processes"]}) == 1


def test_server_config_matches(ts: dict[str, list[str]], replies: Replies) -> None:
    assert_same_fields(handlers.config_json(GpuMagicsServer()), "IServerConfig", ts)
    assert_same_fields(replies.devices["config"], "IServerConfig", ts)


def test_cluster_matches(ts: dict[str, list[str]], replies: Replies) -> None:
    [cluster] = replies.clusters["clusters"]
    assert cluster["name"] == "contract"
    assert_same_fields(cluster, "ICluster", ts)
    assert set(field_names(ClusterRecord)) <= set(cluster)
    assert_same_fields(replies.clusters, "IClustersReply", ts)


def test_a_cluster_elsewhere_matches(ts: dict[str, list[str]], replies: Replies) -> None:
    [elsewhere] = replies.clusters["elsewhere"]
    assert (elsewhere["name"], elsewhere["kernel_id"], elsewhere["connection_file"]) == (
        "elsewhere",
        None,
        "tmpqc6nlsg9.json",
    )
    assert_same_fields(elsewhere, "IClusterElsewhere", ts)


def test_holder_matches(ts: dict[str, list[str]], replies: Replies) -> None:
    assert_same_fields(field_names(GpuHolder), "IHolder", ts)
    holders = replies.processes["processes"]
    assert holders, "the fake GPUs' processes should be listed"
    for holder in holders:
        assert_same_fields(holder, "IHolder", ts)


def test_processes_reply_matches(ts: dict[str, list[str]], replies: Replies) -> None:
    assert_same_fields(replies.processes, "IProcessesReply", ts)


# -- one version -----------------------------------------------------------------------------------------------


def package_json_version() -> Version:
    return Version(json.loads(PACKAGE_JSON.read_text(encoding="utf-8"))["version"])


def test_distribution_version_is_the_package_json_version() -> None:
    assert Version(importlib.metadata.version(DISTRIBUTION)) == package_json_version()


def test_dunder_version_is_the_package_json_version() -> None:
    assert Version(gpu_magics.__version__) == package_json_version()


def test_cluster_members_match(ts: dict[str, list[str]]) -> None:
    """What the kernel writes into a record's ``members`` (its telemetry's own output) is what types.ts reads."""
    from gpu_magics.cluster.telemetry.collector import ClusterTelemetry
    from gpu_magics.cluster.telemetry.reports import ReportedGpu, WorkerReport

    telemetry = ClusterTelemetry(None, interval=1.0, local_hostname="here")  # type: ignore[arg-type]
    gpu = ReportedGpu(index=0, nvml_index=2, uuid="GPU-x", name="NVIDIA H200", process_memory=5)
    report = WorkerReport(worker="tcp://10.0.0.2:1", name="w", host="10.0.0.2", hostname="node", pid=7,
                          time=1.0, interval=1.0, gpus=(gpu,))  # fmt: skip
    telemetry.receive(report, received=1.0)
    [member] = telemetry.members_json(now=1.0)
    assert_same_fields(member, "IClusterMember", ts)
    assert_same_fields(member["gpus"][0], "IMemberGpu", ts)


def test_cluster_jobs_match(ts: dict[str, list[str]]) -> None:
    """A record's ``jobs`` (SLURM jobs behind the workers) are what types.ts reads."""
    from gpu_magics.cluster.info import JobInfo

    job = JobInfo(job_id="12", state="pending", reason="Resources", workers=("w-0",), gpus=("H100 (GPU 0)",))
    assert_same_fields(job.to_json(), "IClusterJob", ts)


# -- what ended kernels left, and GPU memory held while idle ---------------------------------------------------


def test_leftover_replies_match(ts: dict[str, list[str]]) -> None:
    """``GET leftovers`` and ``POST leftovers/end`` (the handlers' own JSON functions) are what types.ts reads."""
    from gpu_magics.server.leftovers.handlers import leftovers_json
    from gpu_magics.server.leftovers.registry import Ended, Leftover

    found = Leftover(pid=7, started=1.5, name="python", kernel_id="k", gpu=0, gpu_uuid="GPU-0", gpu_label="GPU 0",
                     used_memory=1024)  # fmt: skip
    reply = leftovers_json([found])
    assert_same_fields(field_names(Leftover), "ILeftover", ts)
    assert_same_fields(reply["leftovers"][0], "ILeftover", ts)
    assert_same_fields(reply, "ILeftoversReply", ts)
    ended = Ended(7, False, "pid 7 belongs to another user").to_json()
    assert_same_fields(ended, "IEndedLeftover", ts)
    assert_same_fields({"results": [ended], **reply}, "IEndLeftoversReply", ts)


def test_idle_hold_reply_matches(ts: dict[str, list[str]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``GET idle-hold`` (its handler's code, on a real feed) and each kernel's hold are what types.ts reads."""
    from gpu_magics.server.metrics.feed import FEED_KEY, MetricsFeed
    from gpu_magics.server.metrics.handlers import IdleHoldHandler
    from gpu_magics.server.metrics.holds import Hold

    hold = Hold(kernel_id="k", since=1.0, held=5, cached=2, gpus=("GPU 0",), cluster="c", path="a.ipynb")
    assert_same_fields(hold.to_json(now=2000.0, warning_s=60.0), "IIdleHold", ts)
    monkeypatch.setenv("GPU_MAGICS_RUNTIME_DIR", str(tmp_path))
    service = MonitorService(GpuMagicsServer(source="fake", fake_gpus=1), idle_timeout=0)

    async def reply() -> dict[str, Any]:
        feed = MetricsFeed(service, kernel_manager=None, session_manager=None)

        class WithFeed(IdleHoldHandler):
            @property
            def settings(self) -> dict[str, Any]:
                return {FEED_KEY: feed}

        handler = _stand_in(WithFeed, service)
        try:
            await inspect.unwrap(IdleHoldHandler.get)(handler)
        finally:
            feed.close()
        [sent] = handler.sent
        assert isinstance(sent, dict)
        return sent

    try:
        assert_same_fields(asyncio.run(reply()), "IIdleHoldReply", ts)
    finally:
        service.close()
