"""Each notebook's memory cap on its rows (pure), and the server's setting: read, refused in one line when it cannot
be, and given to the kernels the server starts (their environment)."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from traitlets import TraitError

from gpu_magics.arrays.caps.cap import SERVER_CAP_ENV, MemoryCap
from gpu_magics.cluster.records.record import ClusterRecord, KernelRecord
from gpu_magics.server.config import GpuMagicsServer
from gpu_magics.server.ownership.memory_caps import with_caps
from gpu_magics.server.ownership.owners import map_owners, with_self_reports
from tests.server.test_owners import _gpu, _snapshot, ancestry


def test_a_notebooks_rows_carry_the_lower_of_the_servers_cap_and_its_own() -> None:
    snapshot = _snapshot(_gpu(0, 100, 300), _gpu(1, 400, 900))  # each GPU: 100 bytes
    record = ClusterRecord(name="gpu", scheduler_address="tcp://x:1", dashboard_url=None, kind="gpu", workers=1,
                           pid=100, kernel_id="k1", started_at=0.0)  # fmt: skip
    holders = map_owners(snapshot, kernel_pids={100: "k1", 400: "k2"}, records=[record], paths={}, ancestry=ancestry)
    own = {"index": 0, "uuid": "GPU-0", "process_memory": 100, "memory_cap": 20, "memory_cap_by": "notebook"}
    kernels = [KernelRecord(gpus=(own,), pid=100, kernel_id="k1")]
    holders = with_self_reports(holders, [record], {}, snapshot, kernels)
    rows = {h.pid: h for h in with_caps(holders, MemoryCap(share=0.5), snapshot, kernels)}
    assert (rows[100].memory_cap, rows[100].memory_cap_by) == (20, "notebook")  # its own, lower
    assert (rows[300].memory_cap, rows[300].memory_cap_by) == (20, "notebook")  # its child, on the same GPU
    assert (rows[400].memory_cap, rows[400].memory_cap_by) == (50, "server")  # another notebook: the server's
    assert (rows[900].memory_cap, rows[900].memory_cap_by) == (None, None)  # nobody's notebook
    assert rows[100].to_json()["memory_cap"] == 20
    rows = {h.pid: h for h in with_caps(holders, None, snapshot, kernels)}
    assert rows[100].memory_cap == 20 and rows[400].memory_cap is None


def test_a_kernels_malformed_cap_is_left_out() -> None:
    snapshot = _snapshot(_gpu(0, 100))
    holders = map_owners(snapshot, kernel_pids={100: "k1"}, records=[], paths={}, ancestry=ancestry)
    for bad in ({"memory_cap": "lots", "memory_cap_by": "server"}, {"memory_cap": -5, "memory_cap_by": "notebook"},
                {"memory_cap": 10, "memory_cap_by": "me"}):  # fmt: skip
        kernels = [KernelRecord(gpus=({"index": 0, "uuid": "GPU-0", **bad},), pid=100, kernel_id="k1")]
        [row] = with_caps(holders, None, snapshot, kernels)
        assert row.memory_cap is None


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
