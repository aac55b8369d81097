"""``%gpumemory`` on a real GPU, in this process as the kernel: a CuPy array and a view of it, a PyTorch module, and
what no name holds; the names' bytes and the rest add up to NVML's figure for this process within 5%."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output

UNITS = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40}


def record_paths() -> list[Path]:
    """The kernel records in the runtime dir the test shell writes to."""
    from gpu_magics.cluster.records import record

    return sorted(record.runtime_dir().glob("gpu-magics-kernel-*.json"))


def parse_bytes(text: str) -> float:
    """``1.5 GiB`` (as ``format_bytes`` writes it) in bytes."""
    number, unit = text.split()
    return float(number) * UNITS[unit]


def test_the_kernels_gpu_memory_by_name_adds_up_to_nvmls_figure(loaded_shell: InteractiveShell) -> None:
    pytest.importorskip("torch")
    setup = (
        "import cupy, torch\n"
        "t_x = cupy.ones(2**27, dtype=cupy.float64)\n"  # 1 GiB
        "t_view = t_x[::2]\n"
        "t_model = torch.nn.Linear(8192, 8192).cuda()\n"  # 256 MiB of parameters
        "cupy.cuda.Device().synchronize(); torch.cuda.synchronize()"
    )
    assert loaded_shell.run_cell(setup).success
    with capture_output() as captured:
        loaded_shell.run_line_magic("gpumemory", "")
    said = captured.stdout
    header = next(line for line in said.splitlines() if line.startswith("GPU "))
    nvml = parse_bytes(re.search(r"NVML lists ([\d.]+ \w+) for this kernel", header).group(1))  # type: ignore[union-attr]
    x_row = next(line for line in said.splitlines() if line.startswith("  t_x "))
    assert "1.0 GiB" in x_row and "(also t_view)" in x_row and "del t_x" in x_row
    assert "PyTorch module" in next(line for line in said.splitlines() if line.startswith("  t_model "))
    unnamed = [line for line in said.splitlines() if "CuPy arrays no name reaches" in line]
    assert not unnamed or parse_bytes(" ".join(unnamed[0].split()[5:7])) < 0.05 * (1 << 30), unnamed
    listed = sum(parse_bytes(size) for size in re.findall(r"\s([\d.]+ (?:B|KiB|MiB|GiB))\s", said.split("\n", 1)[1]))
    assert abs(listed - nvml) <= 0.05 * nvml, (listed, nvml, said)
    print(f"GPUMEMORY FIGURES nvml={nvml} listed={listed} pid={os.getpid()}")
    from gpu_magics.cluster.records import kernel_report

    assert kernel_report.settle()  # the kernel's record, for the side panel, names the same biggest first
    [record] = [path for path in record_paths() if json.loads(path.read_text())["pid"] == os.getpid()]
    [gpu] = json.loads(record.read_text())["gpus"]
    names = [(row["name"], row["give_back"]) for row in gpu["top_names"]]
    assert names[:2] == [("t_x", "del t_x"), ("t_model", "del t_model")], names
    for name in ("t_x", "t_view", "t_model"):
        del loaded_shell.user_ns[name]


SIZE = re.compile(r"\s([\d.]+ (?:B|KiB|MiB|GiB))(?:\s|$)")


def sections(said: str) -> dict[str, list[str]]:
    """``%gpumemory``'s output by its headers (lines that do not start with two spaces)."""
    found: dict[str, list[str]] = {}
    header = ""
    for line in said.splitlines():
        if line.startswith("  "):
            found.setdefault(header, []).append(line)
        else:
            header = line
            found.setdefault(header, [])
    return found


def listed(lines: list[str]) -> float:
    return sum(parse_bytes(match.group(1)) for line in lines if (match := SIZE.search(line)))


@pytest.mark.slow
def test_a_notebooks_memory_by_name_matches_nvml_per_process(tmp_path: Path) -> None:
    """A real kernel holding a CuPy array, a persisted Dask array on its cluster's worker and a PyTorch model in an
    SPMD rank: ``%gpumemory``'s names and rest add up to NVML's figure for each of the three processes within 5%."""
    pytest.importorskip("torch")
    from gpu_magics.monitor.nvml import NvmlSource
    from tests.test_kernel_faults import loaded_kernel

    with loaded_kernel(tmp_path, "nvml") as kernel:
        kernel.ok("%gpucluster --gpus 0", timeout=300)
        pids = json.loads(kernel.ok(
            "import os, json, cupy, gpu_magics\nimport dask.array as da\nfrom distributed import wait\n"
            "client = gpu_magics.client()\nx = cupy.ones(2**28, dtype=cupy.float64)\n"
            "y = da.ones(2**28, chunks=2**26).map_blocks(cupy.asarray).persist()\nwait(y)\n"
            "print(json.dumps([os.getpid(), *client.run(os.getpid).values()]))", timeout=300,
        ).strip().splitlines()[-1])  # fmt: skip
        rank_said = kernel.ok(
            "%%gpurun spmd -q\nimport os, torch\nmodel = torch.nn.Linear(16384, 16384).cuda()\n"
            "torch.cuda.synchronize()\nprint('PID', os.getpid())", timeout=300,
        )  # fmt: skip
        pids.append(int(rank_said.split("PID", 1)[1].split()[0]))
        kernel.ok("import time\ntime.sleep(3)")  # the worker's next reports say what it holds now
        said = kernel.ok("%gpumemory", timeout=120)
        source = NvmlSource()
        try:
            gpus, _ = source.read(slow=True)
        finally:
            source.close()
        nvml = {p.pid: p.used_memory for p in gpus[0].processes or () if p.pid in pids}
        if len(nvml) < 3:
            pytest.skip(f"NVML's pids are not this machine's (it lists {gpus[0].processes})")
        parts = sections(said)
        kernel_pid, worker_pid, rank_pid = pids
        [kernel_header] = [h for h in parts if h.startswith("GPU 0")]
        [rank_header] = [h for h in parts if h.startswith("In SPMD rank 0")]
        [worker_header] = [h for h in parts if h.startswith("Worker ")]
        [data_header] = [h for h in parts if h.startswith("On the workers of")]
        figures = {
            "kernel": (listed(parts[kernel_header]), nvml[kernel_pid]),
            "rank": (listed(parts[rank_header]), nvml[rank_pid]),
            "worker": (
                parse_bytes(re.search(r"of it the data above ([\d.]+ \w+)", worker_header).group(1))  # type: ignore[union-attr]
                + listed(parts[worker_header]),
                nvml[worker_pid],
            ),
        }
        print(said)
        print("GPUMEMORY FIGURES " + json.dumps({k: [v[0], v[1], (v[0] - v[1]) / v[1]] for k, v in figures.items()}))
        assert any(line.startswith("  x ") for line in parts[kernel_header]), said
        assert any(line.startswith("  model ") for line in parts[rank_header]), said
        assert any(line.startswith("  y ") and "2.0 GiB" in line for line in parts[data_header]), said
        for who, (total, measured) in figures.items():
            assert measured and abs(total - measured) <= 0.05 * measured, (who, total, measured, said)
        kernel.ok("%gpucluster stop", timeout=120)
