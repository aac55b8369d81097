"""A CuPy-backed persisted dask array into GPU ranks (issue 42 item 7 on GPUs): normalized with dask on the GPU
workers and persisted on one of them, ``spmd.push`` balances it over the two ranks with the bytes moved said, and
each rank's ``spmd.shards`` are CuPy arrays on the rank's own GPU (its worker's), which together hold the whole
array; then DDP trains on each rank's shard (torch, where the workers have it). Needs 2 GPUs and CuPy."""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from typing import Any

import pytest
from IPython.core.interactiveshell import InteractiveShell

from gpu_magics import spmd
from gpu_magics.spmd.kernel import ranks as rank_sets
from tests.gpu.test_spmd_gpu import listed_uuid, run, started, worker_gpus

pytestmark = pytest.mark.timeout(300)

ROWS, COLUMNS, CHUNK = 80_000, 64, 10_000

RANK_CELL = """
import os, cupy
from gpu_magics.spmd import shards
t_parts = shards(t_x)
t_rows, t_joined = shards(t_x, concatenate=True)
{"kinds": sorted({type(part).__module__.split(".")[0] for _, part in t_parts}),
 "devices": sorted({part.device.id for _, part in t_parts}), "joined_device": t_joined.device.id,
 "joined_kind": type(t_joined).__module__.split(".")[0], "chunks": len(t_parts), "rows": int(t_joined.shape[0]),
 "abs_sum": float(sum(float(abs(part).sum()) for _, part in t_parts)), "local_rank": int(os.environ["LOCAL_RANK"]),
 "visible": os.environ["CUDA_VISIBLE_DEVICES"], "worker_pid": os.getppid()}
"""

DDP_ON_SHARD_CELL = """
import os, torch, torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from gpu_magics.spmd import shards
t_local = int(os.environ["LOCAL_RANK"])
torch.cuda.set_device(t_local)
t_rows, t_data = shards(t_x, concatenate=True)
t_data = torch.from_dlpack(t_data).float()                 # the CuPy shard as a tensor on this GPU (DLPack)
t_target = t_data[:, :4].sum(dim=1, keepdim=True)
torch.manual_seed(0)
t_model = DDP(torch.nn.Linear(t_data.shape[1], 1).cuda(), device_ids=[t_local])
t_opt = torch.optim.SGD(t_model.parameters(), lr=0.05)
t_losses = []
for t_batch in range(0, t_data.shape[0], 4096):
    t_opt.zero_grad()
    t_loss = torch.nn.functional.mse_loss(t_model(t_data[t_batch:t_batch + 4096]), t_target[t_batch:t_batch + 4096])
    t_loss.backward()
    t_opt.step()
    t_losses.append(t_loss.item())
(str(t_data.device), t_losses[0], t_losses[-1], float(t_model.module.weight.sum()))
"""


@pytest.fixture(scope="module")
def shell(loaded_shell: InteractiveShell) -> InteractiveShell:
    return loaded_shell


@pytest.fixture
def two_gpus(shell: InteractiveShell) -> Iterator[None]:
    import cupy

    if int(cupy.cuda.runtime.getDeviceCount()) < 2:
        pytest.skip("needs 2 GPUs")
    with started(shell, "--gpus 0,1"):
        run(shell, "%%gpurun spmd -q\npass")  # the ranks are started
        yield


def normalized_on_one_worker(address: str) -> Any:
    """A dataset made and normalized with dask on CuPy chunks, persisted on the worker at ``address`` only."""
    import dask
    import dask.array as da

    with dask.config.set({"array.backend": "cupy"}):
        raw = da.random.random((ROWS, COLUMNS), chunks=(CHUNK, COLUMNS))
    return ((raw - raw.mean(axis=0)) / raw.std(axis=0)).persist(workers=[address])


def test_cupy_shards_are_on_each_ranks_own_gpu_after_the_array_is_balanced(
    shell: InteractiveShell, two_gpus: None
) -> None:
    import cupy

    made = rank_sets.current()
    assert made is not None and made.world is not None
    first = made.world.ranks[0].member.address
    x = normalized_on_one_worker(first)
    assert isinstance(x._meta, cupy.ndarray)
    with_line = _push(t_x=x)
    moved = 4 * CHUNK * COLUMNS * 8
    assert with_line.endswith(f"({moved} bytes, 4 chunks) moved between workers to balance them"), with_line
    run(shell, f"%%gpurun spmd -q -o t_cupy_shards\n{RANK_CELL}")
    values = shell.user_ns["t_cupy_shards"].values
    gpu_of = worker_gpus()
    for rank, found in enumerate(values):
        assert found["kinds"] == ["cupy"] and found["joined_kind"] == "cupy"
        assert found["local_rank"] == rank and found["devices"] == [rank] and found["joined_device"] == rank
        own = listed_uuid(found["visible"].split(",")[found["local_rank"]])
        assert own == gpu_of[found["worker_pid"]]  # the device they are on is the rank's worker's own GPU
        assert found["chunks"] == 4 and found["rows"] == 4 * CHUNK
    assert sum(found["abs_sum"] for found in values) == pytest.approx(float(abs(x).sum().compute()), rel=1e-9)


def test_ddp_trains_on_each_ranks_shard(shell: InteractiveShell, two_gpus: None) -> None:
    if importlib.util.find_spec("torch") is None:
        pytest.skip("needs torch in the workers' environment")
    made = rank_sets.current()
    assert made is not None and made.world is not None
    x = normalized_on_one_worker(made.world.ranks[0].member.address)
    _push(t_x=x)
    run(shell, f"%%gpurun spmd --init torch --timeout 2m -q -o t_trained\n{DDP_ON_SHARD_CELL}")
    values = shell.user_ns["t_trained"].values
    assert [device for device, *_ in values] == ["cuda:0", "cuda:1"]
    for _, first_loss, last_loss, _ in values:
        assert last_loss < first_loss
    assert values[0][3] == pytest.approx(values[1][3], rel=1e-5)  # DDP kept the replicas equal


def _push(**values: Any) -> str:
    from IPython.utils.capture import capture_output

    with capture_output() as captured:
        spmd.push(**values)
    return captured.stdout.strip()
