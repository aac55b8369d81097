"""Where a cell's time went (``time_split``), the advice derived from it, and the graph tuning that cuts tasks:
the rules on constructed timelines, then the whole path on real CPU workers through the magic."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Iterator

import dask
import dask.array as da
import numpy as np
import pytest
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output

from gpu_magics.arrays import chunk_advice
from gpu_magics.cluster.control import queries
from gpu_magics.cluster.control.verbs import stop
from gpu_magics.gpurun.graphs import tuning
from gpu_magics.gpurun.timing import advice
from gpu_magics.gpurun.timing.time_split import PARTS, TaskTiming, TimeSplit, split


def test_each_worker_second_is_counted_once() -> None:
    tasks = [
        TaskTiming("a", 1.0, 3.0, "normal"),
        TaskTiming("a", 2.0, 4.0, "normal"),  # overlaps the first: a's busy time is 1..4
        TaskTiming("b", 2.0, 3.0, "sum", transfers=((1.5, 2.5),)),  # the fetch overlapping compute counts once
    ]
    result = split(0.0, 5.0, tasks, workers=2, arrivals=[0.5])
    assert result.seconds["compute"] == pytest.approx(3.0 + 1.0)
    assert result.seconds["transfers"] == pytest.approx(0.5)
    assert result.seconds["client"] == pytest.approx(0.5 + 0.5)  # before the graph arrived, on each worker
    assert result.seconds["result"] == pytest.approx(1.0 + 1.0)  # after the last task, on each worker
    assert result.seconds["scheduling"] == pytest.approx(10.0 - 4.0 - 0.5 - 1.0 - 2.0)
    assert sum(result.share(part) for part in PARTS) == pytest.approx(1.0)
    assert result.prefixes == {"normal": 2, "sum": 1}


def test_an_idle_worker_counts_as_waiting() -> None:
    result = split(0.0, 2.0, [TaskTiming("a", 0.0, 2.0)], workers=2)
    assert result.share("compute") == pytest.approx(0.5)
    assert result.share("scheduling") == pytest.approx(0.5)


def test_gaps_between_graphs_are_the_clients() -> None:
    tasks = [TaskTiming("a", 1.0, 2.0), TaskTiming("a", 4.0, 5.0)]
    result = split(0.0, 6.0, tasks, workers=1, arrivals=[1.0, 3.5])
    assert result.seconds["client"] == pytest.approx(1.0 + 1.5)
    assert result.seconds["scheduling"] == pytest.approx(0.5)
    assert result.seconds["result"] == pytest.approx(1.0)


def test_the_line_names_every_part_and_the_bytes_moved() -> None:
    result = split(0.0, 1.0, [TaskTiming("a", 0.1, 0.5, transfers=((0.5, 0.6),))], transfer_bytes=2**20)
    line = result.line()
    assert line.startswith("time: GPU busy 40%")
    assert "transfers 10% (1.0 MiB)" in line and "client 10%" in line and "result 40%" in line


def _split(prefixes: dict[str, int], compute: float, scheduling: float, tasks: int) -> TimeSplit:
    seconds = dict.fromkeys(PARTS, 0.0)
    seconds.update(compute=compute, scheduling=scheduling)
    wall = compute + scheduling
    return TimeSplit(wall, 1, tasks, seconds, mean_task_s=compute / tasks, prefixes=prefixes)


def test_advice_names_the_philox_generator_when_xorwow_draws_dominate() -> None:
    measured = _split({"add-getitem-normal-mean_chunk": 100, "mean_chunk": 100}, 0.53, 0.02, 200)
    x = advice.ArrayChunks("x", (100_000, 100_000), (10_000, 10_000), 8e8, xorwow_draws={"normal": 100})
    line = advice.advise(measured, [x], draw_costs=(0.0040, 0.0008))
    assert line == (
        "60% of GPU time set up XORWOW generators (4.00 ms a chunk); Philox: "
        "rs = gpu_magics.philox_random_state(seed); x = rs.normal(...)"
    )
    assert len(line) <= advice.MAX_ADVICE
    assert advice.advise(measured, [x], draw_costs=(0.0010, 0.0008)) is None  # too small a difference
    chosen = advice.ArrayChunks("x", (100_000, 100_000), (10_000, 10_000), 8e8)  # the user's own generator
    assert advice.advise(measured, [chosen], draw_costs=(0.0040, 0.0008)) is None


def test_only_cupys_default_generator_counts_as_xorwow() -> None:
    import functools

    class RandomState:  # stands for cupy.random.RandomState (CuPy needs a GPU)
        __module__ = "cupy.random._generator"

        def __init__(self, seed: object = None, method: int = 0) -> None:
            self.state = np.random.RandomState(seed)  # type: ignore[arg-type]

        def random_sample(self, *args: object, **kwargs: object) -> object:
            return self.state.random_sample(*args, **kwargs)  # type: ignore[arg-type]

    default = da.random.RandomState(1, RandomState=RandomState).random_sample(size=(40, 40), chunks=20) + 1
    assert advice.xorwow_draws(default) == {"random_sample": 4}
    philox = functools.partial(RandomState, method=5)
    chosen = da.random.RandomState(1, RandomState=philox).random_sample(size=(40, 40), chunks=20)  # type: ignore[arg-type]
    assert advice.xorwow_draws(chosen) == {}
    on_cpu = da.random.RandomState(1).random_sample(size=(40, 40), chunks=20)
    assert advice.xorwow_draws(on_cpu) == {} and advice.xorwow_draws(on_cpu, numpy_means_device=True) == {
        "random_sample": 4
    }


def test_advice_grows_chunks_only_when_fixed_costs_dominate() -> None:
    x = advice.ArrayChunks("x", (100_000, 100_000), (10_000, 10_000), 8e8)
    costly = _split({"add": 100}, compute=0.1, scheduling=0.4, tasks=100)  # 1 ms of work, 4 ms waiting
    line = advice.advise(costly, [x], None)
    assert line == "tasks do 1.00 ms of work beside 4.00 ms of overhead: make x with chunks=33334 (now 10000, 763 MiB)"
    assert len(line) <= advice.MAX_ADVICE
    assert advice.advise(costly, [x], None, cold=True) is None  # a first run's start-up is not per-task overhead
    busy = _split({"add": 100}, compute=0.45, scheduling=0.05, tasks=100)
    assert advice.advise(busy, [x], None) is None


def test_grown_chunks_keep_work_for_every_worker() -> None:
    assert chunk_advice.grown_chunks((100_000, 100_000), (10_000, 10_000), 4.0) == (20_000, 20_000)
    assert chunk_advice.grown_chunks((100_000,), (10_000,), 3.0) == (25_000,)  # 4 even pieces, not 30000 x 3 + 10000
    assert chunk_advice.grown_chunks((20_000, 20_000), (10_000, 10_000), 16.0, min_chunks=4) is None
    assert chunk_advice.grown_chunks((100_000, 100_000), (10_000, 10_000), 1.5) is None  # not worth saying
    assert chunk_advice.growth_factor(work_s=0.004, overhead_s=0.001) == pytest.approx(1.0)
    assert chunk_advice.growth_factor(work_s=0.001, overhead_s=0.001) == pytest.approx(4.0)


def test_without_aliases_the_seed_graph_has_one_task_per_chunk_less() -> None:
    x = da.random.RandomState(1).normal(10, 1, size=(400, 400), chunks=40)
    y = (x + 1)[::2, ::2].mean()
    graph, keys = y.__dask_graph__(), y.__dask_keys__()
    from dask.array.optimization import optimize

    plain = dict(optimize(graph, keys))
    tuned = tuning.optimize_without_aliases(graph, keys)
    assert len(plain) - len(tuned) == 100  # one forwarding task per chunk
    with dask.config.set(scheduler="sync"):
        reference = float(y.compute())
        with dask.config.set(array_optimize=tuning.optimize_without_aliases):
            assert float(y.compute()) == reference


@pytest.fixture
def cpu_cluster(ip: InteractiveShell) -> Iterator[None]:
    stop.stop()
    with capture_output():
        ip.run_line_magic("gpucluster", "--cpu-workers 2 --no-dashboard")
    ip.run_cell("import dask.array as da", store_history=False)
    try:
        yield
    finally:
        stop.stop()


SEED = (
    "t_x = da.random.RandomState(3).normal(10, 1, size=(1200, 1200), chunks={chunk})\n"
    "(t_x + 1)[::2, ::2].mean().compute()\n"
)
# The seed's shape without a reduction: each chunk goes back to the kernel, so its tasks are not grouped.
SEED_CHUNKS = (
    "t_x = da.random.RandomState(3).normal(10, 1, size=(1200, 1200), chunks={chunk})\n(t_x + 1)[::2, ::2].compute()\n"
)


@pytest.mark.slow  # a cluster with worker processes
def test_a_cluster_cell_reports_its_split_and_advice_on_cpu_workers(ip: InteractiveShell, cpu_cluster: None) -> None:
    from gpu_magics.gpurun import execute

    execute._ran_on.clear()  # as in a fresh kernel: the first cell on this cluster pays its start-up costs
    with capture_output():
        ip.run_cell_magic("gpurun", "multi-gpu -o t_small --no-monitor", SEED_CHUNKS.format(chunk=60))
    assert ip.user_ns["t_small"].advice is None  # no chunk advice from a cold first run
    with capture_output():
        ip.run_cell_magic("gpurun", "multi-gpu -o t_small --no-monitor", SEED_CHUNKS.format(chunk=60))
    result = ip.user_ns["t_small"]
    assert result.split is not None and result.split.workers == 2
    assert sum(result.split.share(part) for part in PARTS) == pytest.approx(1.0)
    assert result.tasks == result.split.tasks > 400  # 400 chunks: a task each, then their concatenation
    assert "\n  time: busy " in str(result)  # CPU workers: "busy", not "GPU busy"
    assert result.advice is not None and "make t_x with chunks=" in result.advice, result.advice
    assert "(now 60, " in result.advice and len(result.advice) <= 160
    saved = result.to_json()
    assert saved["split"]["tasks"] == result.split.tasks and saved["advice"] == result.advice


@pytest.mark.slow  # a cluster with worker processes
def test_the_cluster_runs_the_seed_without_alias_tasks(ip: InteractiveShell, cpu_cluster: None) -> None:
    with capture_output():
        ip.run_cell_magic("gpurun", "multi-gpu -q -o t_big --no-monitor", SEED.format(chunk=600))
    result = ip.user_ns["t_big"]
    assert result.split is not None and not any(p == "mean_chunk" for p in result.split.prefixes)
    assert result.tasks == 2  # the 4 chunks in a run per worker thread; the aggregate (with the finalize) here
    with dask.config.set({"gpu-magics.runs-per-slot": 0}), capture_output():  # grouping off: a task per chunk
        ip.run_cell_magic("gpurun", "multi-gpu -q -o t_big --no-monitor", SEED.format(chunk=600))
    assert ip.user_ns["t_big"].tasks == 4 + 1
    assert result.advice is None


@pytest.mark.slow  # a cluster with worker processes
@pytest.mark.parametrize(
    ("setting", "value", "choices"),
    [
        ("gpu-magics.runs-per-slot", "two", "set a whole number of runs per GPU"),
        ("gpu-magics.fold-reductions", "yes", "set True"),
        ("gpu-magics.aggregate-in-kernel", "yes", "set True"),
    ],
)
def test_a_bad_tuning_setting_is_one_line_and_the_cluster_stays(
    ip: InteractiveShell, cpu_cluster: None, setting: str, value: str, choices: str
) -> None:
    with dask.config.set({setting: value}), pytest.raises(UsageError) as raised:
        ip.run_cell_magic("gpurun", "multi-gpu -q --no-monitor", SEED.format(chunk=600))
    assert str(raised.value).startswith(f"dask config {setting} is {value!r}: {choices}")
    assert "\n" not in str(raised.value)
    with capture_output():
        ip.run_cell_magic("gpurun", "multi-gpu -q -o t_after --no-monitor", SEED.format(chunk=600))
    assert ip.user_ns["t_after"].tasks == 2  # the same cluster runs the next cell (the aggregate in the kernel)


def let_go_of_the_last_cell(timeout: float = 10.0) -> None:
    """Wait until the cluster's scheduler holds none of the last cell's tasks: the client lets go of its futures
    after the cell, asynchronously, and a cell run at once with the same keys would reuse results still held."""
    from gpu_magics.cluster.control import queries

    current = queries.in_use()
    scheduler = None if current is None else queries.local_scheduler(current.client)
    assert scheduler is not None
    deadline = time.monotonic() + timeout
    while scheduler.tasks and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not scheduler.tasks, list(scheduler.tasks)[:5]


@pytest.mark.slow  # a cluster with worker processes
def test_a_reductions_many_chunks_run_in_one_task_per_worker_thread_with_the_same_result(
    ip: InteractiveShell, cpu_cluster: None
) -> None:
    cell = SEED.format(chunk=60).replace("(t_x", "t_mean = (t_x")
    with capture_output():
        ip.run_cell_magic("gpurun", "multi-gpu -q -o t_runs --no-monitor", cell)
    result = ip.user_ns["t_runs"]
    assert result.split is not None and result.split.workers == 2
    runs = {prefix: count for prefix, count in result.split.prefixes.items() if prefix.endswith("-runs")}
    assert list(runs.values()) == [2]  # 400 chunks: a run on each of the 2 worker threads
    assert not [prefix for prefix in result.split.prefixes if "partial" in prefix]  # no combining step is left
    assert result.tasks == 2  # each run combines its own chunks (folded); the aggregate runs in the kernel
    # (whether these two runs draw chunk advice depends on how busy this machine's 2 workers were: the rule is
    # pinned on constructed timelines in test_advice_grows_chunks_only_when_fixed_costs_dominate)
    folded_mean = float(ip.user_ns["t_mean"])
    let_go_of_the_last_cell()  # the same runs again: they must be computed again for the count below
    with dask.config.set({"gpu-magics.aggregate-in-kernel": False}), capture_output():  # the aggregate on a worker
        ip.run_cell_magic("gpurun", "multi-gpu -q -o t_runs --no-monitor", cell)
    assert ip.user_ns["t_runs"].tasks == 2 + 1
    assert float(ip.user_ns["t_mean"]) == folded_mean  # the same function on the same partial results
    # every chunk its own task, dask's own optimization, in this process; the same tree (the cell's split_every)
    with dask.config.set(scheduler="sync", split_every=tuning.REDUCTION_SPLIT_EVERY):
        expected = float(ip.ev("(t_x + 1)[::2, ::2].mean().compute()"))
    assert folded_mean == pytest.approx(expected, rel=1e-12)  # the same draws, summed in another order
    with dask.config.set({"gpu-magics.fold-reductions": False}), capture_output():  # dask's tree, in runs
        ip.run_cell_magic("gpurun", "multi-gpu -q -o t_runs --no-monitor", cell)
    assert ip.user_ns["t_runs"].tasks > 2 + 25  # the runs and dask's combining steps, as before
    assert float(ip.user_ns["t_mean"]) == expected  # the same draws, the same reduction tree: the same bits


def test_cupys_random_state_is_drawn_by_a_reseeded_generator() -> None:
    from dask.array.random import _apply_random

    from gpu_magics.gpurun.graphs import device

    class RandomState:  # stands for cupy.random.RandomState (CuPy needs a GPU)
        __module__ = "cupy.random._generator"

        def __init__(self, seed: object = None) -> None:
            self.state = np.random.RandomState(seed)  # type: ignore[arg-type]

        def normal(self, *args: object, **kwargs: object) -> object:
            return self.state.normal(*args, **kwargs)  # type: ignore[arg-type]

    x = da.random.RandomState(1, RandomState=RandomState).normal(size=(40, 40), chunks=20) + 1
    rewritten = tuning.reseed_generators(x.__dask_graph__())
    draws = [node for layer in rewritten.layers.values() for node in getattr(layer, "mapping", {}).values()]
    assert sum(getattr(node, "func", None) is device.draw_reseeding for node in draws) == 4
    assert not any(getattr(node, "func", None) is _apply_random for node in draws)
    originals = [
        node for layer in x.__dask_graph__().layers.values() for node in getattr(layer, "mapping", {}).values()
    ]
    states = [node.args[2] for node in originals if getattr(node, "func", None) is _apply_random]
    seeds = [node.args[1] for node in draws if getattr(node, "func", None) is device.draw_reseeding]
    assert len(states) == 4 and all(state.shape == (624,) for state in states)  # what each message carried
    # the seed CuPy's RandomState.seed derives from an array, worked out once: 8 bytes a chunk in the messages
    assert sorted(seeds) == sorted(np.uint64(int(hashlib.md5(state).hexdigest()[:16], 16)) for state in states)
    assert all(type(seed) is np.uint64 for seed in seeds)
    numpy_graph = da.random.RandomState(1).normal(size=(40, 40), chunks=20).__dask_graph__()
    assert tuning.reseed_generators(numpy_graph) is numpy_graph  # NumPy's generator is left alone


@pytest.mark.slow  # a cluster with worker processes
def test_bytes_moved_agree_with_the_workers_own_count(ip: InteractiveShell, cpu_cluster: None) -> None:
    from benchmarks.transfers import incoming_bytes

    client = queries.require_client()
    ip.run_cell("from distributed import wait", store_history=False)
    with capture_output():
        ip.run_cell_magic(
            "gpurun",
            "multi-gpu -q --no-monitor",
            "t_rows = da.ones((800, 800), chunks=(400, 800)).persist()\nwait(t_rows)\n",
        )
        before = sum(client.run(incoming_bytes).values())
        ip.run_cell_magic(
            "gpurun",
            "multi-gpu -q --no-monitor -o t_move",
            "t_cols = t_rows.rechunk((800, 400), method='tasks').persist()\nwait(t_cols)\n",
        )
    counted = sum(client.run(incoming_bytes).values()) - before
    split_ = ip.user_ns["t_move"].split
    assert counted > 0 and split_.transfer_bytes == pytest.approx(counted, rel=0.05)
    assert split_.seconds["transfers"] > 0


def test_a_backends_first_run_here_is_cold() -> None:
    from gpu_magics.gpurun import backends, execute

    plan = backends.plan("cpu-threads", workers=3)
    execute._ran_on.discard(execute._backend_key(plan))  # as in a fresh kernel
    assert execute.first_run_on(plan) is True
    assert execute.first_run_on(plan) is False


def _gpus(per_worker: dict[str, float], wall: float, tasks: int = 110) -> TimeSplit:
    """A multi-GPU cell's split with each worker's computing seconds."""
    seconds = dict.fromkeys(PARTS, 0.0)
    compute = sum(per_worker.values())
    seconds.update(compute=compute, scheduling=wall * len(per_worker) - compute)
    return TimeSplit(wall, len(per_worker), tasks, seconds, mean_task_s=compute / tasks, worker_compute=per_worker)


def test_each_workers_computing_is_kept_and_the_busiest_named() -> None:
    timings = [TaskTiming("a", 0.0, 0.3), TaskTiming("b", 0.0, 0.1), TaskTiming("b", 0.2, 0.3)]
    measured = split(0.0, 0.4, timings)
    assert measured.worker_compute == pytest.approx({"a": 0.3, "b": 0.2})
    assert measured.busiest() == ("a", pytest.approx(0.6))
    assert split(0.0, 0.4, timings[:1]).busiest() is None  # one worker: nothing to compare


def test_too_few_or_uneven_chunks_for_the_gpus_get_chunks_that_split_evenly() -> None:
    even = {"w0": 0.1, "w1": 0.1, "w2": 0.1, "w3": 0.1}
    few = advice.ArrayChunks("x", (100_000, 100_000), (50_000, 50_000), 2e10)  # 4 chunks on 4 GPUs
    line = advice.advise(_gpus(even, 0.2, tasks=6), [few], None)
    assert line == "4 chunks do not split evenly over 4 GPUs: make x with chunks=(50000, 25000) (2 a GPU; now 50000)"
    two = advice.ArrayChunks("x", (100_000,), (50_000,), 4e5)
    line = advice.advise(_gpus(even, 0.2, tasks=3), [two], None)
    assert line is not None and line.startswith("2 chunks for 4 GPUs leave 2 idle: make x with chunks=12500 ")
    nine = advice.ArrayChunks("x", (90_000, 90_000), (30_000, 30_000), 7.2e9)
    line = advice.advise(_gpus(even, 0.2, tasks=10), [nine], None)
    assert line is not None and line.startswith("9 chunks do not split evenly over 4 GPUs") and "(2 a GPU" in line
    assert all(len(said) <= advice.MAX_ADVICE for said in (line,))
    seed = advice.ArrayChunks("x", (100_000, 100_000), (10_000, 10_000), 8e8)  # 100 chunks: 25 each
    assert advice.advise(_gpus(even, 0.15), [seed], None) is None
    assert advice.advise(_gpus({"w0": 0.1}, 0.15), [few], None) is None  # one GPU: nothing to balance


def test_one_gpu_doing_most_of_the_work_says_why() -> None:
    seed = advice.ArrayChunks("x", (100_000, 100_000), (10_000, 10_000), 8e8)
    lopsided = _gpus({"tcp://a:1": 0.30, "tcp://a:2": 0.1, "tcp://a:3": 0.1, "tcp://a:4": 0.1}, 0.35)
    line = advice.advise(lopsided, [seed], None, kernel_shares={"tcp://a:1": "GPU 0, 12.0 GiB"})
    assert line == (
        "GPU 0 did 50% of the work of 4 GPUs; this kernel uses it too (GPU 0, 12.0 GiB): %gpucluster free kernel "
        "gives its cache back"
    )
    assert len(line) <= advice.MAX_ADVICE
    other = advice.advise(lopsided, [seed], None)
    assert (
        other == "one GPU did 50% of the work of 4 GPUs: another process may use it too (%gpucluster status shows who)"
    )
    balanced = _gpus({"tcp://a:1": 0.12, "tcp://a:2": 0.1, "tcp://a:3": 0.1, "tcp://a:4": 0.1}, 0.15)
    assert advice.advise(balanced, [seed], None, kernel_shares={"tcp://a:1": "GPU 0, 12.0 GiB"}) is None


def test_the_kernels_share_of_a_workers_gpu_is_found_by_uuid() -> None:
    from gpu_magics.cluster.info import WorkerGpu

    workers = {
        "tcp://a:1": ("host", (WorkerGpu(label="host · GPU 0", name="H100", uuid="GPU-0"),)),
        "tcp://a:2": ("host", (WorkerGpu(label="host · GPU 1", name="H100", uuid="GPU-1"),)),
    }
    held = {"GPU-0": (12 * 2**30, True), "GPU-1": (0, True)}
    assert advice.kernel_on_workers(workers, held) == {"tcp://a:1": "GPU 0, 12.0 GiB"}
