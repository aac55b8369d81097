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
