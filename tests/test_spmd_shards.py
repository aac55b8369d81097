"""A persisted dask array into the ranks on a real cluster (``%gpucluster --cpu-workers 2``, real workers and
rank processes): ``spmd.push(x=x)`` sends a handle, each rank's ``spmd.shards(x)`` fetches exactly the chunks its
own worker holds, the ranks' shards together are the array, an array held by one worker is balanced with the bytes
moved said, and what cannot go is one line."""

from __future__ import annotations

import importlib.util
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output

from gpu_magics import spmd
from gpu_magics.cluster.control import queries
from gpu_magics.spmd.kernel import ranks as rank_sets
from gpu_magics.spmd.rank.shards import DaskShards
from tests.test_gpurun import NO_GPU, inventory

pytestmark = pytest.mark.slow

ROWS, COLUMNS, CHUNK = 8000, 100, 1000
CHUNK_BYTES = CHUNK * COLUMNS * 8

SHARDS_CELL = """
from gpu_magics.spmd import shards
t_parts = shards(t_x)
t_rows, t_joined = shards(t_x, concatenate=True)
import os
([(index[0].start, index[0].stop, index[1].start, index[1].stop) for index, _ in t_parts],
 float(sum(part.sum() for _, part in t_parts)), t_rows, t_joined.shape, type(t_joined).__name__,
 os.environ["GPU_MAGICS_SPMD_WORKER"])
"""


@pytest.fixture(scope="module")
def shell(loaded_shell: InteractiveShell) -> Iterator[InteractiveShell]:
    with inventory(NO_GPU), capture_output():
        loaded_shell.run_line_magic("gpucluster", "--cpu-workers 2 --name shards")
    try:
        with capture_output():
            result = loaded_shell.run_cell("%%gpurun spmd -q\npass")  # the ranks are started
        assert result.success
        yield loaded_shell
    finally:
        with capture_output():
            loaded_shell.run_line_magic("gpucluster", "stop")


def rank_workers() -> list[str]:
    """Each rank's worker address, in rank order."""
    made = rank_sets.current()
    assert made is not None and made.world is not None
    return [rank.member.address for rank in made.world.ranks]


def placed(layout: list[str], name: str) -> Any:
    """A persisted dask array whose chunk ``i`` (``CHUNK`` rows) is held by the worker ``layout[i]`` only: made
    as ``persist()`` makes one (a graph of futures under the array's own keys), with each chunk's place chosen."""
    import dask.array as da

    client = queries.require_client()
    keys = [(name, index, 0) for index in range(len(layout))]
    futures = [
        client.submit(_random_chunk, index, key=key, workers=[address], allow_other_workers=False, pure=False)
        for index, (key, address) in enumerate(zip(keys, layout, strict=True))
    ]
    client.gather(futures)
    chunks = ((CHUNK,) * len(layout), (COLUMNS,))
    return da.Array(dict(zip(keys, futures, strict=True)), name, chunks, dtype=np.float64)


def _random_chunk(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).random((CHUNK, COLUMNS))


def held_keys() -> dict[str, set[Any]]:
    """Worker address -> the keys in its memory."""
    return {address: set(keys) for address, keys in queries.require_client().run(_keys_here).items()}


def _keys_here(dask_worker: Any) -> list[Any]:
    return list(dask_worker.data.keys())


def _ranks_served(dask_worker: Any) -> set[str]:
    """Who this worker sent data to, of the ranks (``get_data``'s ``who``)."""
    return {str(sent["who"]) for sent in dask_worker.transfer_outgoing_log if "rank" in str(sent["who"])}


def push(shell: InteractiveShell, **values: Any) -> str:
    with capture_output() as captured:
        spmd.push(**values)
    return captured.stdout


def run_shards(shell: InteractiveShell) -> list[Any]:
    with capture_output() as captured:
        result = shell.run_cell(f"%%gpurun spmd -q -o t_shards\n{SHARDS_CELL}")
    assert result.success, captured.stdout + captured.stderr
    return list(shell.user_ns["t_shards"].values)


def whole_from_ranks() -> np.ndarray:
    """The array put together from every rank's shards, pulled back (each global place filled exactly once)."""
    whole = np.full((ROWS, COLUMNS), np.nan)
    filled = np.zeros((ROWS, COLUMNS), dtype=int)
    for parts in spmd.pull("t_parts"):
        for index, part in parts:
            whole[index] = part
            filled[index] += 1
    assert (filled == 1).all()
    return whole


def test_each_rank_gets_exactly_the_chunks_its_worker_holds_and_together_they_are_the_array(
    shell: InteractiveShell,
) -> None:
    first, second = rank_workers()
    layout = [first, second, second, first, first, second, first, second]
    x = placed(layout, "t-even")
    said = push(shell, t_x=x)
    assert said.strip() == (
        "spmd.push: t_x: 8 chunks (6.1 MiB) over ranks 0,1 (4 + 4 chunks), each from its rank's own worker with "
        "spmd.shards(t_x); 0 bytes moved"
    )
    values = run_shards(shell)
    for rank, (places, _, rows, joined_shape, kind, worker) in enumerate(values):
        assert worker == rank_workers()[rank]
        mine = [index for index, address in enumerate(layout) if address == rank_workers()[rank]]
        assert places == [(i * CHUNK, (i + 1) * CHUNK, 0, COLUMNS) for i in mine]
        assert kind == "ndarray" and joined_shape == (len(mine) * CHUNK, COLUMNS)
        assert list(np.r_[rows]) == [row for i in mine for row in range(i * CHUNK, (i + 1) * CHUNK)]
    expected = x.compute()
    assert np.array_equal(whole_from_ranks(), expected)
    assert sum(total for _, total, *_ in values) == pytest.approx(float(x.sum().compute()), rel=1e-12)
    handle = spmd.pull("t_x", rank=0)
    assert isinstance(handle, DaskShards) and handle.shape == (ROWS, COLUMNS) and handle.dtype == "float64"
    assert handle.chunk_type == "numpy.ndarray" and "8 chunks over 2 ranks" in repr(handle)


def test_an_array_held_by_one_worker_is_balanced_by_moving_the_fewest_bytes_and_the_line_says_how_many(
    shell: InteractiveShell,
) -> None:
    first, second = rank_workers()
    x = placed([first] * 8, "t-uneven")
    said = push(shell, t_x=x)
    moved = 4 * CHUNK_BYTES
    assert said.strip().endswith(
        f"(4 + 4 chunks), each from its rank's own worker with spmd.shards(t_x); 3.1 MiB ({moved} bytes, 4 chunks) "
        "moved between workers to balance them"
    )
    values = run_shards(shell)
    assert [len(places) for places, *_ in values] == [4, 4]
    # what each rank fetched is in its own worker's memory
    handle = spmd.pull("t_x", rank=0)
    held = held_keys()
    for chunk in handle.chunks:
        assert chunk.key in held[rank_workers()[chunk.rank]]
    copies = [chunk for chunk in handle.chunks if chunk.key not in held[first]]
    assert len(copies) == 4 and all(chunk.key in held[second] and chunk.rank == 1 for chunk in copies)
    assert np.array_equal(whole_from_ranks(), x.compute())
    # each rank fetched from its own worker only, as the workers' logs of what they sent show
    sent = queries.require_client().run(_ranks_served)
    assert sent == {first: {"gpu-magics rank 0"}, second: {"gpu-magics rank 1"}}
    # pushed again, the moved chunks are where they were moved to already: nothing moves twice
    again = push(shell, t_x=x).strip()
    assert again.endswith("(4 + 4 chunks), each from its rank's own worker with spmd.shards(t_x); 0 bytes moved")
    assert [len(places) for places, *_ in run_shards(shell)] == [4, 4]
    assert np.array_equal(whole_from_ranks(), x.compute())
    # pushing the name again lets the chunks go: with the notebook's own array gone, the workers hold none of them
    push(shell, t_x=None)
    del x, handle
    deadline = time.monotonic() + 20
    while any(
        "t-uneven" in str(key) or "gpu-magics-shard-" in str(key) for keys in held_keys().values() for key in keys
    ):
        assert time.monotonic() < deadline, "the chunks stayed on the workers after the name was pushed again"
        time.sleep(0.2)


def test_an_array_pushed_to_one_rank_goes_whole_to_that_ranks_worker(shell: InteractiveShell) -> None:
    first, second = rank_workers()
    x = placed([first, second] * 4, "t-one")
    said = push(shell, ranks=[1], t_one=x).strip()
    assert said.startswith("spmd.push: t_one: 8 chunks (6.1 MiB) over rank 1 (8 chunks), each from its rank's own")
    assert said.endswith(f"3.1 MiB ({4 * CHUNK_BYTES} bytes, 4 chunks) moved between workers to balance them")
    with capture_output() as captured:
        result = shell.run_cell(
            "%%gpurun spmd -q --ranks 1\nfrom gpu_magics.spmd import shards\nt_rows, t_all = shards(t_one, True)\n"
            "float(t_all.sum()), t_rows"
        )
    assert result.success, captured.stdout + captured.stderr
    total, rows = result.result
    assert rows == (slice(0, ROWS),) and total == pytest.approx(float(x.sum().compute()), rel=1e-12)


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch is not installed (pip install torch)")
def test_ddp_trains_on_each_ranks_shard_of_a_dataset_normalized_with_dask(shell: InteractiveShell) -> None:
    """The README's recipe on CPU ranks (gloo): normalize with dask, persist, push, train DDP on each rank's shard."""
    import dask.array as da

    raw = da.random.random((ROWS, 16), chunks=(CHUNK, 16))
    x = ((raw - raw.mean(axis=0)) / raw.std(axis=0)).persist()
    assert "8 chunks" in push(shell, t_data=x)
    body = (
        "import torch\n"
        "from torch.nn.parallel import DistributedDataParallel as DDP\n"
        "from gpu_magics.spmd import shards\n"
        "t_rows, t_mine = shards(t_data, concatenate=True)\n"
        "t_mine = torch.from_numpy(t_mine).float()\n"
        "t_target = t_mine[:, :4].sum(dim=1, keepdim=True)\n"
        "torch.manual_seed(0)\n"
        "t_model = DDP(torch.nn.Linear(16, 1))\n"
        "t_opt = torch.optim.SGD(t_model.parameters(), lr=0.05)\n"
        "t_losses = []\n"
        "for t_at in range(0, len(t_mine), 500):\n"
        "    t_loss = torch.nn.functional.mse_loss(t_model(t_mine[t_at:t_at + 500]), t_target[t_at:t_at + 500])\n"
        "    t_opt.zero_grad(); t_loss.backward(); t_opt.step()\n"
        "    t_losses.append(t_loss.item())\n"
        "(len(t_mine), t_losses[0], t_losses[-1], float(t_model.module.weight.sum()))"
    )
    with capture_output() as captured:
        result = shell.run_cell(f"%%gpurun spmd --init torch -q -o t_trained\n{body}")
    assert result.success, captured.stdout + captured.stderr
    values = shell.user_ns["t_trained"].values
    assert [rows for rows, *_ in values] == [ROWS // 2, ROWS // 2]  # balanced: the same steps on every rank
    assert all(last < first for _, first, last, _ in values)
    assert values[0][3] == pytest.approx(values[1][3], rel=1e-6)  # DDP kept the replicas equal


def test_arrays_that_are_not_persisted_or_not_arrays_are_refused_in_one_line(shell: InteractiveShell) -> None:
    import dask
    import dask.array as da

    lazy = da.random.random((ROWS, COLUMNS), chunks=(CHUNK, COLUMNS))
    sliced = lazy.persist()[:10]
    for value, message in [
        (
            lazy,
            "spmd.push: t_bad is a dask array that is not persisted (its chunks are not in the cluster's memory); "
            "call t_bad = t_bad.persist() first, then push it",
        ),
        (sliced, "spmd.push: t_bad is a dask array that is not persisted"),
        (
            dask.delayed(sum)([1, 2]),
            "spmd.push: t_bad is a dask Delayed; only a persisted dask array goes to the "
            "ranks as shards (push t_bad.compute() to send its value)",
        ),
    ]:
        with pytest.raises(UsageError) as caught:
            spmd.push(t_bad=value)
        assert str(caught.value).startswith(message) and "\n" not in str(caught.value)


def test_shards_of_something_else_fails_the_cell_with_one_line(shell: InteractiveShell) -> None:
    with capture_output() as captured:
        result = shell.run_cell("%%gpurun spmd -q\nfrom gpu_magics.spmd import shards\nshards([1, 2])")
    assert not result.success
    assert (
        "TypeError: shards() takes a persisted dask array pushed to the ranks with gpu_magics.spmd.push(x=x), "
        "not a list" in captured.stdout + captured.stderr
    )


def test_chunks_larger_than_a_transfer_shard_arrive_whole(shell: InteractiveShell) -> None:
    """A chunk larger than distributed's transfer shard (``distributed.comm.shard``, 64 MiB) leaves its worker in
    several frames; the rank joins them before it makes the array (a 256 MB CuPy chunk once failed to unpack)."""
    import dask
    import dask.array as da

    rows = 2 * 70 * 2**20 // (8 * COLUMNS)  # two chunks of 70 MiB, each split into two frames on the way
    with dask.config.set({"array.backend": "numpy"}):
        big = da.ones((rows, COLUMNS), chunks=(rows // 2, COLUMNS)).persist()
    push(shell, t_x=big)
    values = run_shards(shell)
    assert sum(total for _, total, *_ in values) == float(rows * COLUMNS)
    assert sum(shape[0] for *_, shape, _, _ in values) == rows
    with capture_output():
        spmd.push(t_x=None)
