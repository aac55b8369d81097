"""Discovery records: content, permissions, atomic writes, stale-record clean-up."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gpu_magics.cluster.records import record as cluster_records
from gpu_magics.cluster.records.record import ClusterRecord


@pytest.fixture(autouse=True)
def runtime_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    directory = tmp_path / "runtime"
    monkeypatch.setenv(cluster_records.RUNTIME_DIR_ENV, str(directory))
    return directory


def record(**changes: object) -> ClusterRecord:
    fields: dict[str, object] = {
        "name": "gpu",
        "scheduler_address": "tcp://127.0.0.1:40000",
        "dashboard_url": "http://127.0.0.1:40001/status",
        "kind": "gpu",
        "workers": 4,
        "gpus": ("0", "1", "2", "3"),
    }
    fields.update(changes)
    return ClusterRecord(**fields)  # type: ignore[arg-type]


def test_write_is_private_and_round_trips(runtime_dir: Path) -> None:
    written = record()
    path = cluster_records.write_record(written)
    assert path == runtime_dir / f"gpu-magics-cluster-{os.getpid()}-gpu.json"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    data = json.loads(path.read_text())
    assert data == written.to_json()
    assert data["pid"] == os.getpid() and data["kernel_id"] is None and data["gpus"] == ["0", "1", "2", "3"]
    assert data["version"] == cluster_records.SCHEMA_VERSION
    assert cluster_records.list_records() == [written]
    assert not [p for p in runtime_dir.iterdir() if p.name.endswith(".tmp")]


def test_rewrite_replaces_and_remove_deletes(runtime_dir: Path) -> None:
    path = cluster_records.write_record(record(workers=4))
    assert cluster_records.write_record(record(workers=2)) == path
    assert [r.workers for r in cluster_records.list_records()] == [2]
    cluster_records.remove_record(path)
    cluster_records.remove_record(path)  # twice is fine
    assert cluster_records.list_records() == []


def test_dead_pid_and_garbage_are_cleaned(runtime_dir: Path) -> None:
    finished = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead_pid = int(finished.stdout)
    stale = cluster_records.write_record(record(pid=dead_pid, name="stale"))
    live = cluster_records.write_record(record(name="live"))
    garbage = runtime_dir / "gpu-magics-cluster-1-garbage.json"
    garbage.write_text("{not json")
    other = runtime_dir / "kernel-abc.json"
    other.write_text("{}")
    assert [r.name for r in cluster_records.list_records(clean=False)] == ["live"]
    assert stale.exists() and garbage.exists()
    assert [r.name for r in cluster_records.list_records()] == ["live"]
    assert not stale.exists() and not garbage.exists()
    assert live.exists() and other.exists()


def test_reused_pid_is_stale() -> None:
    # a record claiming this process but written before the process existed belongs to an earlier process
    cluster_records.write_record(record(started_at=time.time() - 10 * 365 * 86400))
    assert cluster_records.list_records() == []


def test_no_directory_means_no_records(runtime_dir: Path) -> None:
    assert not runtime_dir.exists()
    assert cluster_records.list_records() == []


def test_default_directory_is_jupyters(monkeypatch: pytest.MonkeyPatch) -> None:
    from jupyter_core.paths import jupyter_runtime_dir

    monkeypatch.delenv(cluster_records.RUNTIME_DIR_ENV)
    assert cluster_records.runtime_dir() == Path(jupyter_runtime_dir())


def test_kernel_id_outside_a_kernel_is_none() -> None:
    assert cluster_records.current_kernel_id() is None
    assert cluster_records.here()["kernel_id"] is None and cluster_records.here()["connection_file"] is None


@pytest.mark.parametrize(
    ("connection_file", "kernel_id"),
    [
        ("kernel-5f0d5b5e-8c1a-4f7e-9a57-3c8b1d6c2e10.json", "5f0d5b5e-8c1a-4f7e-9a57-3c8b1d6c2e10"),
        ("kernel-k1.json", "k1"),  # a kernel manager's own ids need not be UUIDs
        ("tmpqc6nlsg9.json", None),  # jupyter_client's KernelManager on its own: no id a server knows
        ("kernel-.json", None),
        ("my-kernel-1.json", None),
        (None, None),
    ],
)
def test_only_a_connection_file_named_by_its_kernel_id_gives_a_kernel_id(
    connection_file: str | None, kernel_id: str | None
) -> None:
    assert cluster_records.kernel_id_of(connection_file) == kernel_id


def test_a_record_says_its_connection_file_and_host_and_an_older_one_invents_no_kernel_id() -> None:
    written = record(kernel_id=None, connection_file="tmpqc6nlsg9.json", host="gpu-node-1")
    assert ClusterRecord.from_json(json.loads(json.dumps(written.to_json()))) == written
    older = {**record().to_json(), "version": 5, "kernel_id": "tmpqc6nlsg9"}
    del older["connection_file"], older["host"]
    back = ClusterRecord.from_json(older)
    assert (back.kernel_id, back.connection_file, back.host) == (None, "tmpqc6nlsg9.json", None)
    real = "5f0d5b5e-8c1a-4f7e-9a57-3c8b1d6c2e10"
    assert ClusterRecord.from_json({**older, "kernel_id": real}).kernel_id == real  # a server's kernel: kept
    kernel = cluster_records.KernelRecord.from_json({"pid": 1, "time": 1, "started_at": 1, "kernel_id": "tmpab12"})
    assert (kernel.kernel_id, kernel.connection_file) == (None, "tmpab12.json")
    assert cluster_records.KernelRecord(kernel_id="k1").to_json()["version"] == cluster_records.KERNEL_SCHEMA_VERSION


def test_the_managers_facts_travel_in_the_record_and_bad_ones_are_dropped() -> None:
    from gpu_magics.cluster.managers.gateway.manager import GatewayManager
    from gpu_magics.cluster.options import parse_cluster_line

    connected = GatewayManager(parse_cluster_line("--gateway --connect default.5b4e57c3")).facts("gpu").to_json()
    record = ClusterRecord("g", "tls://10.0.0.9:8786", None, "gateway", 1, facts=connected)
    back = ClusterRecord.from_json(json.loads(json.dumps(record.to_json())))
    assert back.facts == connected and back.facts is not None
    assert (back.facts["owned"], back.facts["ends"], back.facts["restartable"]) == (False, "detach", False)
    hostile = {**record.to_json(), "facts": ["not", "a", "dict"]}
    assert ClusterRecord.from_json(hostile).facts is None  # an older kernel's record: the views offer nothing
    odd = {**record.to_json(), "facts": {"ends": "explode", "workers": 7, "owned": 1}}
    facts = ClusterRecord.from_json(odd).facts
    assert facts is not None and facts["ends"] == "close" and facts["workers"] == "unknown" and facts["owned"] is True
