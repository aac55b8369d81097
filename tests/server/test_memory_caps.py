"""Each notebook's memory cap on its rows (pure), and the server's setting: read, refused in one line when it cannot
be, and given to the kernels the server starts (their environment)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import replace

import pytest
from traitlets import TraitError

from gpu_magics.arrays.caps.cap import SERVER_CAP_ENV, MemoryCap
from gpu_magics.cluster.records.record import ClusterRecord, KernelRecord
from gpu_magics.monitor.models import GpuReading
from gpu_magics.server.config import GpuMagicsServer
from gpu_magics.server.ownership.memory_caps import with_caps
from gpu_magics.server.ownership.owners import map_owners, with_self_reports
from tests.server.test_owners import _gpu, _snapshot, ancestry

GIB = 2**30


def big(gpu: GpuReading) -> GpuReading:
    return replace(gpu, memory_total=100 * GIB)


def test_a_notebooks_rows_carry_the_lower_of_the_servers_cap_and_its_own() -> None:
    snapshot = _snapshot(big(_gpu(0, 100, 300)), big(_gpu(1, 400, 900, 200)))
    record = ClusterRecord(name="gpu", scheduler_address="tcp://x:1", dashboard_url=None, kind="gpu", workers=1,
                           pid=100, kernel_id="k1", started_at=0.0)  # fmt: skip
    pids = {100: "k1", 400: "k2"}
    holders = map_owners(snapshot, kernel_pids=pids, records=[record], paths={}, ancestry=ancestry)
    kernels = [KernelRecord(gpus=(), pid=100, kernel_id="k1", memory_cap=str(20 * GIB))]  # holds nothing itself
    holders = with_self_reports(holders, [record], {}, snapshot, kernels)
    rows = {(h.pid, h.gpu): h for h in with_caps(holders, MemoryCap(share=0.5), snapshot, kernels)}
    assert (rows[100, 0].memory_cap, rows[100, 0].memory_cap_by) == (20 * GIB, "notebook")  # its own, lower
    assert (rows[300, 0].memory_cap, rows[300, 0].memory_cap_by) == (20 * GIB, "notebook")  # its child
    assert (rows[200, 1].memory_cap, rows[200, 1].memory_cap_by) == (20 * GIB, "notebook")  # its child, on another GPU
    assert (rows[400, 1].memory_cap, rows[400, 1].memory_cap_by) == (
        50 * GIB,
        "server",
    )  # another notebook: the server's
    assert (rows[900, 1].memory_cap, rows[900, 1].memory_cap_by) == (None, None)  # nobody's notebook
    assert rows[100, 0].to_json()["memory_cap"] == 20 * GIB
    rows = {(h.pid, h.gpu): h for h in with_caps(holders, None, snapshot, kernels)}
    assert rows[100, 0].memory_cap == 20 * GIB and rows[400, 1].memory_cap is None
    higher = [KernelRecord(gpus=(), pid=100, kernel_id="k1", memory_cap="80%")]
    rows = {(h.pid, h.gpu): h for h in with_caps(holders, MemoryCap(share=0.5), snapshot, higher)}
    assert (rows[100, 0].memory_cap, rows[100, 0].memory_cap_by) == (50 * GIB, "server")  # the server's binds


def test_a_kernels_malformed_cap_is_left_out() -> None:
    snapshot = _snapshot(big(_gpu(0, 100)))
    holders = map_owners(snapshot, kernel_pids={100: "k1"}, records=[], paths={}, ancestry=ancestry)
    for bad in ("lots", "-5", "150%"):
        kernels = [KernelRecord(gpus=(), pid=100, kernel_id="k1", memory_cap=bad)]
        [row] = with_caps(holders, None, snapshot, kernels)
        assert row.memory_cap is None
    record = KernelRecord(gpus=(), pid=100, kernel_id="k1", memory_cap="25%").to_json()
    assert KernelRecord.from_json(record).memory_cap == "25%"


@pytest.mark.parametrize(
    ("value", "said"),
    [
        ("lots", "GpuMagicsServer.memory cap 'lots' is not a size"),
        ("-2GiB", "GpuMagicsServer.memory cap '-2GiB': a cap is above zero"),
        ("120%", "GpuMagicsServer.memory cap '120%': a share of each GPU's memory is above 0% and at most 100%"),
    ],
)
def test_a_servers_cap_that_cannot_be_is_refused_in_one_line(value: str, said: str) -> None:
    with pytest.raises(TraitError) as raised:
        GpuMagicsServer(memory_cap=value)
    assert str(raised.value).startswith(said) and "\n" not in str(raised.value)


def test_the_servers_cap_is_read_tidied_and_defaults_to_its_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(SERVER_CAP_ENV, raising=False)
    assert GpuMagicsServer().memory_cap == "" and GpuMagicsServer().cap() is None
    assert GpuMagicsServer(memory_cap="8 GiB").memory_cap == str(8 * 2**30)
    assert GpuMagicsServer(memory_cap="25%").cap() == MemoryCap(share=0.25)
    monkeypatch.setenv(SERVER_CAP_ENV, "40GB")
    assert GpuMagicsServer().cap() == MemoryCap(size=40 * 10**9)


@pytest.fixture
def jp_server_config() -> dict[str, object]:
    return {"ServerApp": {"jpserver_extensions": {"gpu_magics": True}}, "GpuMagicsServer": {"memory_cap": "12GiB",
            "source": "fake", "fake_gpus": 1}}  # fmt: skip


@pytest.fixture
def kept_cap_env() -> Iterator[None]:
    """The server's variable as it was before the server set it."""
    before = os.environ.get(SERVER_CAP_ENV)
    yield
    if before is None:
        os.environ.pop(SERVER_CAP_ENV, None)
    else:
        os.environ[SERVER_CAP_ENV] = before


async def test_the_servers_kernels_start_with_its_cap(kept_cap_env: None, jp_serverapp: object) -> None:
    """A real jupyter-server with the cap set: the environment its kernels inherit has it."""
    assert os.environ[SERVER_CAP_ENV] == str(12 * 2**30)
