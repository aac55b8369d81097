"""``%gpumemory`` in a real IPython shell: the names that hold GPU memory, biggest first, each allocation counted
once (a view or a second name is listed beside the first), found in variables, one level into containers and
objects, in ``Out`` and in the last error's frames, each with its way to give it back; the data a cluster keeps for
the kernel's variables (persisted collections, futures), by variable, with its workers; bad lines in one line.
GPU arrays are stood in by objects that offer ``__cuda_array_interface__`` (what any GPU array library offers)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output

from tests.test_kernel_faults import loaded_kernel

STAND_IN = '''
class t_DeviceArray:
    """A GPU array as a library offers it: its address, shape and type through the CUDA array interface."""

    def __init__(self, address, shape, typestr="<f8"):
        self.interface = {"data": (address, False), "shape": shape, "typestr": typestr, "version": 3}

    @property
    def __cuda_array_interface__(self):
        return self.interface
'''


@pytest.fixture
def shell(loaded_shell: InteractiveShell) -> Iterator[InteractiveShell]:
    assert loaded_shell.run_cell(STAND_IN).success
    yield loaded_shell
    for name in [name for name in loaded_shell.user_ns if name.startswith("t_")]:
        del loaded_shell.user_ns[name]


def report(shell: InteractiveShell, line: str = "") -> str:
    with capture_output() as captured:
        shell.run_line_magic("gpumemory", line)
    return captured.stdout


def rows(text: str) -> list[str]:
    return [line.split()[0] for line in text.splitlines() if line.startswith("  ")]


def test_names_are_listed_biggest_first_each_allocation_once_with_its_way_back(shell: InteractiveShell) -> None:
    shell.run_cell(
        "t_small = t_DeviceArray(0x1000, (1000,))\n"  # 8 KB
        "t_big = t_DeviceArray(0x100000, (1000, 1000))\n"  # 8 MB
        "t_again = t_big\n"  # a second name for the same memory
        "t_batch = [t_DeviceArray(0x900000, (500, 500)), 3]\n"  # 2 MB in a list
        "class t_Holder: pass\n"
        "t_holder = t_Holder(); t_holder.weights = t_DeviceArray(0xA00000, (250, 250))\n"  # 0.5 MB on an object
    )
    said = report(shell)
    assert rows(said) == ["t_big", "t_batch[0]", "t_holder.weights", "t_small"]
    big = next(line for line in said.splitlines() if line.startswith("  t_big"))
    assert "1000 x 1000 <f8" in big and "7.6 MiB" in big and "del t_big" in big and "(also t_again)" in big
    assert "del t_batch" in next(line for line in said.splitlines() if "t_batch[0]" in line)


def test_out_and_the_last_errors_frames_hold_memory_and_say_how_to_let_it_go(shell: InteractiveShell) -> None:
    shell.run_cell("t_DeviceArray(0x2000000, (100, 100))", store_history=True)  # only Out holds it
    shell.run_cell(
        "def t_fails():\n    t_inside = t_DeviceArray(0x3000000, (300, 300))\n    raise ValueError('t')\nt_fails()"
    )
    said = report(shell)
    out_row = next(line for line in said.splitlines() if line.startswith("  Out["))
    assert "%reset -f out" in out_row
    frame_row = next(line for line in said.splitlines() if "the last error's frame t_fails(): t_inside" in line)
    assert "%gpumemory --drop-traceback" in frame_row
    assert "let go" in report(shell, "--drop-traceback")
    assert "t_fails()" not in report(shell)


def test_with_no_gpu_data_it_says_so_in_one_line(shell: InteractiveShell, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(shell.user_ns, "Out", {})
    monkeypatch.setattr("sys.last_traceback", None, raising=False)
    names = [name for name in shell.user_ns if isinstance(shell.user_ns[name], shell.user_ns["t_DeviceArray"])]
    for name in names:
        monkeypatch.delitem(shell.user_ns, name)
    said = report(shell).strip()
    assert (
        said
        == "%gpumemory: this kernel holds nothing on a GPU, nor do its SPMD ranks, and no cluster keeps data for it"
    )


@pytest.mark.parametrize("line", ["--top 0", "--top lots", "--top -3", "--everything"])
def test_a_bad_line_is_one_line(shell: InteractiveShell, line: str) -> None:
    with pytest.raises(UsageError) as raised, capture_output():
        shell.run_line_magic("gpumemory", line)
    message = str(raised.value)
    assert message.startswith("%gpumemory: ") and "\n" not in message and "Traceback" not in message


@pytest.mark.slow
def test_the_clusters_data_is_listed_by_the_variable_that_holds_it(shell: InteractiveShell) -> None:
    shell.magics_manager.registry["ClusterMagics"].wait_for_workers = True
    with capture_output():
        assert shell.run_cell("%gpucluster --cpu-workers 1 --name t_memory").error_in_exec is None
    try:
        setup = (
            "import dask.array as da, gpu_magics\nfrom distributed import wait\n"
            "t_kept = da.random.random((1000, 1000), chunks=500).persist(); wait(t_kept)\n"  # 8 MB in 4 chunks
            "t_lazy = da.zeros((2000, 2000), chunks=500)\n"  # nothing in memory: not listed
            "t_future = gpu_magics.client().submit(bytes, 3_000_000); wait(t_future)"
        )
        assert shell.run_cell(setup).error_in_exec is None
        said = report(shell)
        section = said.split("On the workers of 't_memory'", 1)[1]
        assert rows(section) == ["t_kept", "t_future"]
        kept = next(line for line in section.splitlines() if line.startswith("  t_kept"))
        assert "dask.Array (4 keys)" in kept and "7.6 MiB" in kept and "del t_kept" in kept
        assert "t_lazy" not in said
    finally:
        with capture_output():
            shell.run_line_magic("gpucluster", "stop")


@pytest.mark.slow
def test_what_the_spmd_ranks_variables_hold_is_listed_by_rank(tmp_path: Path) -> None:
    """Each rank is asked what its own variables hold, with the same search as the kernel's (a real kernel, CPU
    ranks: their GPU arrays stood in by the interface)."""
    pytest.importorskip("torch")
    with loaded_kernel(tmp_path) as kernel:
        kernel.ok("%gpucluster --cpu-workers 2 --name t_ranks", timeout=120)
        kernel.ok(
            "%%gpurun spmd -q\n" + STAND_IN.replace("t_DeviceArray", "DeviceArray")
            + "import os\nrank = int(os.environ['RANK'])\n"
            "weights = DeviceArray(0x100000 * (rank + 1), (1000, 1000 * (rank + 1)))\nalias = weights",
            timeout=180,
        )  # fmt: skip
        said = kernel.ok("%gpumemory", timeout=120)
        for rank, size in ((0, "7.6 MiB"), (1, "15.3 MiB")):
            section = said.split(f"In SPMD rank {rank} ", 1)[1].split("\n", 2)[1]
            assert section.startswith("  weights ") and size in section and "(also alias)" in section, said
        kernel.ok("%gpucluster stop", timeout=120)


def test_a_ranks_and_a_workers_memory_beyond_their_names_adds_up_to_what_they_hold() -> None:
    """The rest of a rank's or worker's memory, by kind, from its own figures: the names and the rest add up to
    NVML's figure for the process."""
    from gpu_magics.cluster.info import WorkerGpu
    from gpu_magics.magics.gpumemory import Report, _workers, text
    from gpu_magics.spmd.rank.held_by_name import Held, rank_rest

    mib = 1 << 20
    pools = {"torch_allocated": 300 * mib, "torch_reserved": 400 * mib, "cupy_used": 0, "cupy_held": 64 * mib}
    rest = rank_rest(256 * mib, pools, 1024 * mib)
    assert [(item.what, item.size // mib) for item in rest] == [
        ("arrays no name reaches", 44),
        ("cached by PyTorch", 100),
        ("cached by CuPy's pool", 64),
        ("the CUDA context, libraries and the rest", 560),
    ]
    assert 256 * mib + sum(item.size for item in rest) == 1024 * mib
    assert rank_rest(0, {}, None) == []  # a CPU rank: nothing

    class Telemetry:
        def worker_gpus_alone(self) -> dict[str, tuple[str, tuple[WorkerGpu, ...]]]:
            gpu = WorkerGpu("GPU 0", "H200", "GPU-0", process_memory=900 * mib, array_memory=600 * mib,
                            cached_memory=100 * mib, context_memory=200 * mib)  # fmt: skip
            idle = WorkerGpu("GPU 1", "H200", "GPU-1")
            return {"tcp://127.0.0.1:1": ("here", (gpu,)), "tcp://127.0.0.1:2": ("here", (idle,))}

    [(worker, held, data, worker_rest)] = _workers(Telemetry(), {"tcp://127.0.0.1:1": 512 * mib})
    assert (worker, held, data) == ("tcp://127.0.0.1:1 (GPU 0)", 900 * mib, 512 * mib)
    assert [(item.what, item.size // mib) for item in worker_rest] == [
        ("arrays no name reaches", 88),
        ("cached by its pool", 100),
        ("the CUDA context, libraries and the rest", 200),
    ]
    said = text(
        Report(
            [],
            [],
            [],
            "c",
            {0: [Held("model", "PyTorch module", "2 tensors", 256 * mib)]},
            {0: (1024 * mib, rest)},
            [(worker, held, data, worker_rest)],
        ),
        top=5,
    )
    assert (
        "In SPMD rank 0 (its variables: del them in a %%gpurun spmd cell; NVML lists 1.0 GiB for its process):" in said
    )
    assert "Worker tcp://127.0.0.1:1 (GPU 0) holds 900 MiB (NVML), of it the data above 512 MiB:" in said
    assert [line.split()[0] for line in said.splitlines()[1:6]] == ["model", "arrays", "cached", "cached", "the"]
