"""A memory cap per notebook, on simulated GPUs: what a cap may be (bad ones in one line), how the kernel, its
cluster's worker and its SPMD rank share it on each GPU, the limits each process sets in its allocators, the one
line a cell the cap stops shows (in a real IPython shell), and the workers' plugin in a real Dask cluster."""

from __future__ import annotations

import os
import sys
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output

from gpu_magics import gpus
from gpu_magics.arrays.caps import allocators, notebook, over_cap
from gpu_magics.arrays.caps.cap import SERVER_CAP_ENV, CapError, MemoryCap, lower, parse_cap, share

GIB = 2**30


@pytest.fixture
def capped(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[gpus.GpuDevice]]:
    """Two simulated GPUs, the server's cap of 16 GiB, and the cap's state (and the allocators' variables) put back
    afterwards."""
    monkeypatch.setenv("GPU_MAGICS_SOURCE", "fake:2")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setenv(SERVER_CAP_ENV, "16GiB")
    for name in (allocators.CUPY_ENV, allocators.JAX_ENV):
        monkeypatch.delenv(name, raising=False)
    previous = gpus.set_inventory(None)
    try:
        yield list(gpus.inventory().devices())
    finally:
        notebook._user = None
        notebook._workers.clear()
        notebook._ranks.clear()
        notebook._client = None
        allocators.limit_this_process({}, {})
        for finder in [f for f in sys.meta_path if isinstance(f, allocators._AfterImport)]:
            sys.meta_path.remove(finder)
        gpus.set_inventory(previous)


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("lots", "memory cap 'lots' is not a size: use a size like 8GiB"),
        ("-5GiB", "memory cap '-5GiB': a cap is above zero (off lifts it)"),
        ("0", "memory cap '0': a cap is above zero (off lifts it)"),
        ("150%", "memory cap '150%': a share of each GPU's memory is above 0% and at most 100%"),
        ("half%", "memory cap 'half%' is not a share"),
        ("8", "memory cap '8' is under 64 MiB: give a unit, like 8GiB"),
        ("9 parsecs", "memory cap '9 parsecs' is not a size"),
    ],
)
def test_a_cap_that_cannot_be_is_one_line(text: str, said: str) -> None:
    with pytest.raises(CapError) as raised:
        parse_cap(text)
    assert str(raised.value).startswith(said)
    assert "\n" not in str(raised.value)


def test_a_cap_above_the_gpus_memory_says_the_memory() -> None:
    with pytest.raises(CapError, match=r"above the GPU's memory \(80.0 GiB\): give at most that"):
        parse_cap("100GiB", gpu_memory=80 * GIB)
    assert parse_cap("80GiB", gpu_memory=80 * GIB) == MemoryCap(size=80 * GIB)


def test_sizes_and_shares_read_as_written() -> None:
    assert parse_cap("8GiB") == MemoryCap(size=8 * GIB)
    assert parse_cap(" 20 GB ") == MemoryCap(size=20 * 10**9)
    assert parse_cap("25%", by="notebook") == MemoryCap(share=0.25, by="notebook")
    assert parse_cap("off") is None and parse_cap("") is None and parse_cap("None") is None
    assert parse_cap("25%").on(80 * GIB) == 20 * GIB  # type: ignore[union-attr]
    assert parse_cap("100GiB").on(80 * GIB) == 80 * GIB  # type: ignore[union-attr]
    for text in ("8GiB", "25%", "1.5 TiB"):
        cap = parse_cap(text)
        assert cap is not None and parse_cap(cap.spec()) == cap
    assert parse_cap("8GiB").text == "8.0 GiB"  # type: ignore[union-attr]


def test_the_lower_cap_binds_on_each_gpu() -> None:
    server, mine = MemoryCap(share=0.5), MemoryCap(size=30 * GIB, by="notebook")
    assert lower(server, mine, 80 * GIB) is mine  # 40 GiB against 30
    assert lower(server, mine, 40 * GIB) is server  # 20 GiB against 30
    assert lower(None, mine, 80 * GIB) is mine and lower(server, None, 80 * GIB) is server
    assert share(30 * GIB, 3) == 10 * GIB and share(30 * GIB, 0) == 30 * GIB


def test_the_kernel_worker_and_rank_share_the_cap_equally(capped: list[gpus.GpuDevice]) -> None:
    first, second = capped
    assert {uuid: found[:2] for uuid, found in notebook.shares().items()} == {
        first.uuid: (16 * GIB, 16 * GIB),
        second.uuid: (16 * GIB, 16 * GIB),
    }
    assert notebook.worker_share([first.cuda_id]) == (8 * GIB, first.memory_total)
    notebook.workers_joined([first.cuda_id], client=None)
    assert notebook.shares()[first.uuid][0] == 8 * GIB
    assert notebook.shares()[second.uuid][0] == 16 * GIB  # no worker there
    assert notebook.rank_share(first.uuid) == (int(16 * GIB / 3), first.memory_total)
    notebook.ranks_joined([first.uuid])
    assert notebook.shares()[first.uuid][0] == int(16 * GIB / 3)
    line = notebook.describe()
    assert line is not None
    assert line.startswith("cap 16.0 GiB a GPU (the server's)")
    assert "GPU 0: 5.3 GiB each to the kernel, worker, rank" in line and "GPU 1: all to the kernel" in line
    notebook.ranks_left()
    notebook.workers_left()
    assert notebook.shares()[first.uuid][0] == 16 * GIB


def test_a_user_may_lower_the_servers_cap_never_raise_it(capped: list[gpus.GpuDevice]) -> None:
    with pytest.raises(CapError, match=r"above the server's cap \(16.0 GiB on GPU 0\): a notebook may only lower"):
        notebook.set_user_cap("32GiB")
    assert notebook.user_cap() is None
    notebook.set_user_cap("4GiB")
    assert notebook.user_cap() == MemoryCap(size=4 * GIB, by="notebook")
    assert allocators.limits() == {0: 4 * GIB, 1: 4 * GIB}
    assert os.environ[allocators.CUPY_ENV] == str(4 * GIB)  # CuPy's pools, made later, read it
    assert float(os.environ[allocators.JAX_ENV]) == pytest.approx(4 * GIB / capped[0].memory_total, abs=1e-4)
    notebook.set_user_cap("off")
    assert allocators.limits() == {0: 16 * GIB, 1: 16 * GIB}


def test_without_a_cap_nothing_is_limited(capped: list[gpus.GpuDevice], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(SERVER_CAP_ENV)
    notebook.apply()
    assert notebook.shares() == {} and notebook.describe() is None
    assert allocators.limits() == {} and allocators.CUPY_ENV not in os.environ
    assert notebook.worker_share([capped[0].cuda_id]) is None


def test_a_jax_fraction_the_user_chose_lower_stays(
    capped: list[gpus.GpuDevice], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(allocators.JAX_ENV, "0.01")
    notebook.apply()
    assert os.environ[allocators.JAX_ENV] == "0.01"
    allocators.limit_this_process({}, {})
    assert os.environ[allocators.JAX_ENV] == "0.01"


def test_pytorch_gets_its_fraction_when_it_starts_cuda(capped: list[gpus.GpuDevice], tmp_path: Path) -> None:
    """A stand-in of ``torch`` (PyTorch is not in this suite): imported after the cap, its ``cuda._lazy_call``
    queue gets the fraction; once CUDA has started, the fraction is set at once."""
    (tmp_path / "torch_standin_cap.py").write_text(
        "class _Cuda:\n"
        "    started = False\n"
        "    queued = []\n"
        "    fractions = {}\n"
        "    def is_initialized(self): return self.started\n"
        "    def _lazy_call(self, call): self.queued.append(call)\n"
        "    def device_count(self): return 2\n"
        "    def set_per_process_memory_fraction(self, fraction, device): self.fractions[device] = fraction\n"
        "cuda = _Cuda()\n"
    )
    sys.path.insert(0, str(tmp_path))
    try:
        allocators.after_import("torch_standin_cap", allocators._limit_torch)
        notebook.apply()
        import torch_standin_cap  # type: ignore[import-not-found]

        cuda: Any = torch_standin_cap.cuda
        assert len(cuda.queued) == 1 and cuda.fractions == {}
        cuda.queued[0]()  # PyTorch starts CUDA
        total = capped[0].memory_total
        assert cuda.fractions == {0: pytest.approx(16 * GIB / total), 1: pytest.approx(16 * GIB / total)}
        cuda.started = True
        notebook.set_user_cap("8GiB")
        allocators._limit_torch(torch_standin_cap)  # what a limit set after the import does for ``torch``
        assert cuda.fractions[0] == pytest.approx(8 * GIB / total)
        assert not [f for f in sys.meta_path if getattr(f, "name", None) == "torch_standin_cap"]  # the hook went
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("torch_standin_cap", None)


def test_a_process_started_with_its_share_limits_itself(capped: list[gpus.GpuDevice]) -> None:
    env = allocators.share_env(4 * GIB, 80 * GIB)
    assert env == {"GPU_MAGICS_MEMORY_SHARE": f"{4 * GIB}/{80 * GIB}", allocators.CUPY_ENV: str(4 * GIB),
                   allocators.JAX_ENV: "0.0500"}  # fmt: skip
    os.environ.update(env)
    try:
        assert allocators.limit_from_env(2) == 4 * GIB
        assert allocators.limits() == {0: 4 * GIB, 1: 4 * GIB}
    finally:
        os.environ.pop("GPU_MAGICS_MEMORY_SHARE")
    assert allocators.limit_from_env(1) is None


class OutOfMemoryError(MemoryError):
    """CuPy's, as ``cupy.cuda.memory.OutOfMemoryError`` words it (CuPy is not in this suite)."""

    def __init__(self, size: int, total: int, limit: int = 0) -> None:
        limited = f", limit set to: {limit:,} bytes" if limit > 0 else ""
        super().__init__(f"Out of memory allocating {size:,} bytes (allocated so far: {total:,} bytes{limited}).")


TORCH_STOPPED = (
    "CUDA out of memory. Tried to allocate 6.00 GiB. GPU 1 has a total capacity of 139.81 GiB of which 120.02 GiB is "
    "free. Including non-PyTorch memory, this process has 4.53 GiB memory in use. 8.00 GiB allowed; Of the allocated "
    "memory 4.00 GiB is allocated by PyTorch, and 0 bytes is reserved by PyTorch but unallocated."
)


def test_the_allocators_errors_are_read() -> None:
    stopped = over_cap.stopped_by_limit(OutOfMemoryError(2 * GIB, 7 * GIB, 8 * GIB))
    assert stopped == over_cap.Stopped(asked=2 * GIB, held=7 * GIB, limit=8 * GIB, gpu=None)
    assert over_cap.stopped_by_limit(OutOfMemoryError(2 * GIB, 7 * GIB)) is None  # a full GPU, no limit
    torch = over_cap.stopped_by_limit(RuntimeError(TORCH_STOPPED))
    assert torch == over_cap.Stopped(asked=6 * GIB, held=int(4.53 * GIB), limit=8 * GIB, gpu=1)
    assert over_cap.stopped_by_limit(RuntimeError(TORCH_STOPPED.replace("8.00 GiB allowed; ", ""))) is None
    assert over_cap.stopped_by_limit(ValueError("allocating 5 bytes")) is None


def test_the_line_names_the_cap_the_use_and_the_biggest_names(capped: list[gpus.GpuDevice]) -> None:
    names = {1: [{"name": "embeddings", "bytes": 3 * GIB, "give_back": "del embeddings"},
                 {"name": "Out[3]", "bytes": GIB, "give_back": "%reset -f out"}]}  # fmt: skip
    notebook.set_user_cap("8GiB")
    line = over_cap.line_for(RuntimeError(TORCH_STOPPED), lambda indices: {i: names.get(i, []) for i in indices})
    assert line == (
        "GPU 1: this kernel would pass the notebook's memory cap of 8.0 GiB (this notebook's own): it asked for 6.0 "
        "GiB more, holds 4.5 GiB; biggest: embeddings 3.0 GiB, Out[3] 1.0 GiB; free what you no longer need "
        "(del embeddings), or see %gpumemory"
    )
    notebook.workers_joined([capped[0].cuda_id], client=None)
    line = over_cap.line_for(OutOfMemoryError(GIB, 4 * GIB, 4 * GIB))
    assert line is not None and line.startswith(
        "GPU 0: this kernel would pass the notebook's memory cap of 8.0 GiB (this notebook's own) (its share: 4.0 "
        "GiB, the cap split 2 ways): it asked for 1.0 GiB more, holds 4.0 GiB; %gpumemory lists what holds it"
    )
    notebook.set_user_cap("off")
    notebook.workers_left()
    os.environ.pop(SERVER_CAP_ENV)
    assert over_cap.line_for(RuntimeError(TORCH_STOPPED)) is None  # no cap binds: the error as it is


@pytest.fixture
def capped_shell(ip: InteractiveShell, capped: list[gpus.GpuDevice]) -> InteractiveShell:
    notebook.apply()
    return ip


@pytest.mark.parametrize(
    ("value", "said"),
    [
        ("lots", "%gpumemory --cap: memory cap 'lots' is not a size: use a size like 8GiB"),
        ("-1GiB", "%gpumemory --cap: memory cap '-1GiB': a cap is above zero (off lifts it)"),
        ("500GiB", "%gpumemory --cap: memory cap '500GiB' is above the GPU's memory (140 GiB)"),
        ("32GiB", "%gpumemory --cap: memory cap '32GiB' is above the server's cap (16.0 GiB on GPU 0)"),
    ],
)
def test_a_bad_cap_in_the_notebook_is_one_line_and_changes_nothing(
    capped_shell: InteractiveShell, value: str, said: str
) -> None:
    with pytest.raises(UsageError) as raised:
        capped_shell.run_line_magic("gpumemory", f"--cap {value}")
    assert str(raised.value).startswith(said) and "\n" not in str(raised.value)
    assert notebook.user_cap() is None and allocators.limits() == {0: 16 * GIB, 1: 16 * GIB}


def test_the_magic_sets_and_lifts_the_notebooks_cap(capped_shell: InteractiveShell) -> None:
    with capture_output() as captured:
        capped_shell.run_line_magic("gpumemory", "--cap 10%")
    assert captured.stdout.startswith(
        "%gpumemory: cap 14.0 GiB a GPU (10% of its memory, yours; %gpumemory --cap off lifts it); GPU 0: all to the "
        "kernel; GPU 1: all to the kernel"
    )
    with pytest.raises(UsageError, match="above the server's cap"):
        capped_shell.run_line_magic("gpumemory", "--cap 25%")  # 35 GiB
    with capture_output() as captured:
        capped_shell.run_line_magic("gpumemory", "--cap 4GiB")
    assert captured.stdout.startswith("%gpumemory: cap 4.0 GiB a GPU (yours; %gpumemory --cap off lifts it)")
    assert allocators.limits() == {0: 4 * GIB, 1: 4 * GIB}
    with capture_output() as captured:
        capped_shell.run_line_magic("gpumemory", "")
    assert captured.stdout.startswith("%gpumemory: cap 4.0 GiB a GPU")
    capped_shell.run_line_magic("gpumemory", "--cap off")
    assert allocators.limits() == {0: 16 * GIB, 1: 16 * GIB}


def test_a_cell_the_cap_stops_shows_one_line(capped_shell: InteractiveShell) -> None:
    capped_shell.user_ns["t_OutOfMemoryError"] = OutOfMemoryError
    with capture_output() as captured:
        result = capped_shell.run_cell(f"raise t_OutOfMemoryError({GIB}, {16 * GIB}, {16 * GIB})")
    assert not result.success
    shown = (captured.stdout + captured.stderr).strip().splitlines()
    assert shown == [
        "OutOfMemoryError: GPU 0: this kernel would pass the notebook's memory cap of 16.0 GiB (the server's): it "
        "asked for 1.0 GiB more, holds 16.0 GiB; %gpumemory lists what holds it"
    ]
    with capture_output() as captured:
        capped_shell.run_cell(f"raise t_OutOfMemoryError({GIB}, {16 * GIB})")  # a full GPU: the traceback as ever
    assert "Traceback" in captured.stdout + captured.stderr or "----" in captured.stdout + captured.stderr


@pytest.mark.slow
def test_the_workers_plugin_limits_each_worker_to_its_share(capped: list[gpus.GpuDevice]) -> None:
    """A real cluster of one worker process that sees GPU "1" first: the plugin limits it, and given again under
    its name (as when ranks come), replaces the old share."""
    from distributed import Client, LocalCluster

    from gpu_magics.arrays.caps.worker_plugin import MemoryCapPlugin

    def limits_there() -> tuple[dict[int, int], str | None]:
        return allocators.limits(), os.environ.get(allocators.CUPY_ENV)

    with (
        LocalCluster(
            n_workers=1,
            threads_per_worker=1,
            processes=True,
            dashboard_address=None,
            env={"CUDA_VISIBLE_DEVICES": "1,0"},
        ) as cluster,  # fmt: skip
        Client(cluster) as client,
    ):
        client.register_plugin(MemoryCapPlugin({"1": (8 * GIB, 80 * GIB)}), name=MemoryCapPlugin.name)
        assert list(client.run(limits_there).values()) == [({0: 8 * GIB, 1: 8 * GIB}, str(8 * GIB))]
        client.register_plugin(MemoryCapPlugin({"1": (5 * GIB, 80 * GIB)}), name=MemoryCapPlugin.name)
        assert list(client.run(limits_there).values()) == [({0: 5 * GIB, 1: 5 * GIB}, str(5 * GIB))]
        client.register_plugin(MemoryCapPlugin({"3": (5 * GIB, 80 * GIB)}), name=MemoryCapPlugin.name)
        assert list(client.run(limits_there).values()) == [({}, None)]  # not its GPU: left alone

        def stopped_on_the_worker() -> None:
            class OutOfMemoryError(MemoryError):  # CuPy's words, raised on the worker
                pass

            raise OutOfMemoryError(
                f"Out of memory allocating {GIB:,} bytes (allocated so far: {16 * GIB:,} bytes, limit set to: "
                f"{16 * GIB:,} bytes)."
            )

        with pytest.raises(MemoryError) as raised:
            client.submit(stopped_on_the_worker, pure=False).result()
        line = over_cap.line_for(raised.value)
        assert line is not None and line.startswith(
            "GPU 0: a worker of this notebook would pass the notebook's memory cap of 16.0 GiB (the server's): it "
            "asked for 1.0 GiB more, holds 16.0 GiB; %gpumemory lists what holds it"
        ), line


def test_a_gpu_clusters_workers_start_within_their_share(capped: list[gpus.GpuDevice]) -> None:
    from gpu_magics.arrays.caps.worker_plugin import MemoryCapPlugin
    from gpu_magics.cluster.managers.local.factories import capped as capped_start
    from gpu_magics.cluster.options import ClusterOptions, LocalOptions

    extra: dict[str, Any] = {}
    plugins = capped_start(ClusterOptions(), ("0", "1"), extra)
    assert [type(p) for p in plugins] == [MemoryCapPlugin]
    assert plugins[0].by_gpu == {"0": (8 * GIB, capped[0].memory_total), "1": (8 * GIB, capped[1].memory_total)}
    assert extra == {"device_memory_limit": int(8 * GIB * 0.8)}  # spilled before the share
    extra = {}
    capped_start(ClusterOptions(local=LocalOptions(rmm_pool_size=GIB)), ("0",), extra)
    assert extra == {"rmm_maximum_pool_size": 8 * GIB, "device_memory_limit": int(8 * GIB * 0.8)}
    too_big = ClusterOptions(local=LocalOptions(rmm_pool_size=10 * GIB))
    with pytest.raises(
        UsageError, match=r"--rmm-pool-size: each worker's share of this notebook's memory cap is 8.0 GiB"
    ):
        capped_start(too_big, ("0",), {})
    os.environ.pop(SERVER_CAP_ENV)
    assert capped_start(ClusterOptions(), ("0",), {}) == ()


def test_the_after_import_hook_runs_once_after_the_module(tmp_path: Path) -> None:
    (tmp_path / "hooked_standin_cap.py").write_text("VALUE = 41\n")
    seen: list[types.ModuleType] = []
    sys.path.insert(0, str(tmp_path))
    try:
        allocators.after_import("hooked_standin_cap", seen.append)
        import hooked_standin_cap  # type: ignore[import-not-found]

        assert seen == [hooked_standin_cap] and hooked_standin_cap.VALUE == 41
        assert hooked_standin_cap.__loader__ is not None and "hooked_standin_cap" not in str(sys.meta_path[:1])
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("hooked_standin_cap", None)


@pytest.mark.slow
def test_a_real_kernel_keeps_to_the_servers_cap_and_says_the_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A kernel started with the server's cap in its environment (as the server's kernels are): its allocators'
    limits are set at ``%load_ext``, and a cell the cap stops shows the one line in the cell's own output."""
    from tests.test_kernel_faults import loaded_kernel

    monkeypatch.setenv(SERVER_CAP_ENV, "8GiB")
    monkeypatch.delenv(allocators.CUPY_ENV, raising=False)
    with loaded_kernel(tmp_path, source="fake:1") as kernel:
        said = kernel.ok("import os; print(os.environ['CUPY_GPU_MEMORY_LIMIT'])")
        assert said.strip() == str(8 * GIB)
        reply, text = kernel.run(
            "class OutOfMemoryError(MemoryError): pass\n"
            f"raise OutOfMemoryError('Out of memory allocating {GIB:,} bytes (allocated so far: {8 * GIB:,} bytes, "
            f"limit set to: {8 * GIB:,} bytes).')"
        )
        assert reply["status"] == "error"
        assert reply["traceback"] == [
            "OutOfMemoryError: GPU 0: this kernel would pass the notebook's memory cap of 8.0 GiB (the server's): it "
            "asked for 1.0 GiB more, holds 8.0 GiB; %gpumemory lists what holds it"
        ]
        assert "Traceback" not in text
        assert kernel.ok("print(1 + 1)").strip() == "2"  # the kernel goes on


def test_the_kernels_record_says_its_own_cap_even_holding_nothing(
    capped: list[gpus.GpuDevice], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The server reads the notebook's own cap from the kernel's record, for every row of the notebook (its workers'
    too): the record is written for the cap alone, and goes when the cap is lifted and nothing is held."""
    from gpu_magics.cluster.records import kernel_report, record

    monkeypatch.setenv(record.RUNTIME_DIR_ENV, str(tmp_path))
    notebook.set_user_cap("4GiB")
    kernel_report.refresh(fresh=True)
    [written] = record.list_kernel_records(clean=False)
    assert written.memory_cap == str(4 * GIB) and written.gpus == ()
    notebook.set_user_cap("off")
    kernel_report.refresh(fresh=True)
    assert record.list_kernel_records(clean=False) == []


def test_a_ranks_error_that_its_share_stopped_is_one_line(capped: list[gpus.GpuDevice]) -> None:
    notebook.workers_joined([capped[0].cuda_id], client=None)
    notebook.ranks_joined([capped[0].uuid])
    share = notebook.shares()[capped[0].uuid][0]
    message = str(OutOfMemoryError(GIB, share, share))
    assert over_cap.rank_line("OutOfMemoryError", message, 0, capped[0].uuid) == (
        "GPU 0: rank 0 would pass the notebook's memory cap of 16.0 GiB (the server's) (its share: 5.3 GiB, the cap "
        "split 3 ways): it asked for 1.0 GiB more, holds 5.3 GiB; %gpumemory lists what holds it"
    )
    assert over_cap.rank_line("ValueError", message, 0, capped[0].uuid) is None
    assert over_cap.rank_line("OutOfMemoryError", str(OutOfMemoryError(GIB, share)), 0, capped[0].uuid) is None


def test_jaxs_out_of_memory_is_read_where_this_process_set_its_fraction(capped: list[gpus.GpuDevice]) -> None:
    jax_error = RuntimeError(f"RESOURCE_EXHAUSTED: Out of memory while trying to allocate {5 * GIB} bytes.")
    assert over_cap.stopped_by_limit(jax_error) is None  # no fraction set here yet
    notebook.apply()
    stopped = over_cap.stopped_by_limit(jax_error)
    assert stopped is not None and stopped.asked == 5 * GIB
    assert stopped.limit == pytest.approx(16 * GIB, rel=0.001)
    xla = RuntimeError(
        "RESOURCE_EXHAUSTED: Out of memory while trying to allocate 5.00GiB with allocator GPU_0_bfc on device 0."
    )
    assert over_cap.stopped_by_limit(xla) == stopped
    line = over_cap.line_for(jax_error)
    assert line is not None and line.startswith(
        "GPU 0: this kernel would pass the notebook's memory cap of 16.0 GiB (the server's): it asked for 5.0 GiB more"
    )


def test_a_cap_on_a_kernel_without_gpus_says_nothing_here_is_limited(
    ip: InteractiveShell, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GPU_MAGICS_SOURCE", "fake:0")
    monkeypatch.delenv(SERVER_CAP_ENV, raising=False)
    previous = gpus.set_inventory(None)
    try:
        with capture_output() as captured:
            ip.run_line_magic("gpumemory", "--cap 4GiB")
        assert captured.stdout.strip() == (
            "%gpumemory: cap 4.0 GiB a GPU (yours); no GPU is visible here, so nothing in this kernel is limited"
        )
        with capture_output() as captured:
            ip.run_line_magic("gpumemory", "--cap off")
        assert captured.stdout.strip() == "%gpumemory: no memory cap binds this notebook"
    finally:
        notebook._user = None
        allocators.limit_this_process({}, {})
        gpus.set_inventory(previous)
