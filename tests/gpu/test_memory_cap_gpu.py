"""A memory cap per notebook on a real GPU, through real kernels started with the server's cap in their environment
(as the server's kernels are): CuPy and PyTorch allocations past the kernel's share stop with the one line that names
the cap, the use and the biggest names; an uncapped notebook and the capped one go on working; a raw ``cudaMalloc``
escapes the cap (measured); a cluster's worker and an SPMD rank get their shares and the kernel's shrinks. Prints
``MEMORY CAP FIGURES``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpu_magics.arrays.caps.cap import SERVER_CAP_ENV
from tests.test_kernel_faults import loaded_kernel

GIB = 2**30
PID = "import os; print(os.getpid())"


def nvml_used(pid: int) -> int | None:
    """What NVML says ``pid`` holds on GPU 0 (``None``: it does not list it, as where its pids are not ours)."""
    from gpu_magics.monitor.nvml import NvmlSource

    source = NvmlSource()
    try:
        gpus, _ = source.read(slow=True)
    finally:
        source.close()
    return next((p.used_memory for p in gpus[0].processes or () if p.pid == pid), None)


def error_line(reply: dict[str, object], text: str) -> str:
    assert reply["status"] == "error", text
    shown = reply["traceback"]
    assert isinstance(shown, list) and len(shown) == 1, (shown, text)
    return str(shown[0])


def test_a_cap_stops_cupy_and_pytorch_past_it_and_the_others_go_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("torch")
    figures: dict[str, object] = {}
    (tmp_path / "capped").mkdir()
    (tmp_path / "free").mkdir()
    monkeypatch.delenv(SERVER_CAP_ENV, raising=False)
    with loaded_kernel(tmp_path / "free", "nvml") as free:
        monkeypatch.setenv(SERVER_CAP_ENV, "4GiB")
        with loaded_kernel(tmp_path / "capped", "nvml") as capped:
            pid = int(capped.ok(PID).strip())
            capped.ok(f"import cupy\nx = cupy.ones({2 * GIB}, dtype=cupy.uint8)", timeout=120)
            reply, text = capped.run(f"y = cupy.ones({3 * GIB}, dtype=cupy.uint8)", timeout=120)
            line = error_line(reply, text)
            figures["cupy_line"] = line
            assert line.startswith(
                "OutOfMemoryError: GPU 0: this kernel would pass the notebook's memory cap of 4.0 GiB (the server's): "
                "it asked for 3.0 GiB more, holds 2.0 GiB; biggest: x 2.0 GiB"
            ), line
            assert "(del x)" in line, line

            capped.ok("del x\ncupy.get_default_memory_pool().free_all_blocks()")
            capped.ok(f"import torch\na = torch.empty({2 * GIB}, dtype=torch.uint8, device='cuda')", timeout=180)
            reply, text = capped.run(f"b = torch.empty({3 * GIB}, dtype=torch.uint8, device='cuda')", timeout=120)
            line = error_line(reply, text)
            figures["torch_line"] = line
            assert "GPU 0: this kernel would pass the notebook's memory cap of 4.0 GiB (the server's)" in line, line
            assert "biggest: a 2.0 GiB" in line, line

            # the uncapped notebook takes more than the cap, and the capped one goes on within it
            said = free.ok(f"import cupy\nbig = cupy.ones({6 * GIB}, dtype=cupy.uint8)\nprint(int(big[-1]))", 120)
            assert said.strip() == "1"
            assert capped.ok("z = cupy.arange(10)\nprint(int(z.sum()))").strip() == "45"

            # what escapes: a raw cudaMalloc, outside every allocator's limit
            capped.ok("del a\ntorch.cuda.empty_cache()")
            capped.ok(f"raw = cupy.cuda.runtime.malloc({6 * GIB})")
            figures["raw_malloc_gib"] = 6
            held = nvml_used(pid)
            figures["nvml_with_raw_gib"] = None if held is None else round(held / GIB, 2)
            if held is not None:
                assert held > 6 * GIB, held  # NVML sees it: the panel counts it against the cap, nothing stopped it
            capped.ok("cupy.cuda.runtime.free(raw)")
    print("MEMORY CAP FIGURES " + json.dumps(figures))


def test_the_workers_and_ranks_take_their_shares(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("torch")
    monkeypatch.setenv(SERVER_CAP_ENV, "12GiB")
    figures: dict[str, object] = {}
    with loaded_kernel(tmp_path, "nvml") as kernel:
        kernel.ok("%gpucluster --gpus 0", timeout=300)
        kernel.ok("import gpu_magics; client = gpu_magics.client()", timeout=300)
        read = (
            "import json, cupy\nfrom gpu_magics.arrays.caps import allocators\n"
            "def limit():\n    return cupy.get_default_memory_pool().get_limit()\n"
            "print(json.dumps([allocators.limits().get(0), list(client.run(limit).values())]))"
        )
        kernel_limit, worker_limits = json.loads(kernel.ok(read, timeout=120).strip().splitlines()[-1])
        figures["with_a_worker"] = {"kernel": kernel_limit, "worker": worker_limits}
        assert kernel_limit == 6 * GIB and worker_limits == [6 * GIB], figures

        reply, text = kernel.run(  # a task past the worker's share: its error comes back to the cell
            f"def past_the_share():\n    import cupy\n    return int(cupy.ones({7 * GIB}, dtype='u1').sum())\n"
            "client.submit(past_the_share, pure=False).result()",
            timeout=300,
        )
        line = error_line(reply, text)
        figures["worker_line"] = line
        assert (
            "GPU 0: a worker of this notebook would pass the notebook's memory cap of 12.0 GiB (the server's) "
            "(its share: 6.0 GiB" in line
        ), line

        said = kernel.ok(
            "%%gpurun spmd -q\nimport torch\nfrom gpu_magics.arrays.caps import allocators\n"
            "ok = torch.empty(3 * 2**30, dtype=torch.uint8, device='cuda')\n"
            "try:\n    torch.empty(2 * 2**30, dtype=torch.uint8, device='cuda')\n    stopped = False\n"
            "except torch.OutOfMemoryError:\n    stopped = True\n"
            "print('RANK', allocators.limits().get(0), stopped)",
            timeout=300,
        )
        rank_line = next(line for line in said.splitlines() if "RANK" in line)
        figures["rank"] = rank_line
        assert rank_line.split("RANK", 1)[1].split() == [str(4 * GIB), "True"], said
        kernel_limit, worker_limits = json.loads(kernel.ok(read, timeout=120).strip().splitlines()[-1])
        figures["with_a_rank"] = {"kernel": kernel_limit, "worker": worker_limits}
        assert kernel_limit == 4 * GIB and worker_limits == [4 * GIB], figures

        reply, text = kernel.run(  # a rank's allocation past its share fails the cell with the one line
            "%%gpurun spmd -q\nmore = torch.empty(2 * 2**30, dtype=torch.uint8, device='cuda')", timeout=300
        )
        assert reply["status"] == "error", text
        shown = text + "\n".join(map(str, reply.get("traceback") or []))
        said = next((line for line in shown.splitlines() if "would pass" in line), shown)
        figures["rank_line"] = said
        assert (
            "GPU 0: rank 0 would pass the notebook's memory cap of 12.0 GiB (the server's) (its share: 4.0 GiB, "
            "the cap split 3 ways): it asked for 2.0 GiB more" in said
        ), shown
        kernel.ok("%gpucluster stop", timeout=120)
        figures["after_stop_kernel"] = json.loads(
            kernel.ok("print(__import__('json').dumps(allocators.limits().get(0)))").strip()
        )
        assert figures["after_stop_kernel"] == 12 * GIB, figures
    print("MEMORY CAP FIGURES " + json.dumps(figures, default=str))


def test_jax_stops_past_the_kernels_share_with_the_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("jax")
    monkeypatch.setenv(SERVER_CAP_ENV, "4GiB")
    with loaded_kernel(tmp_path, "nvml") as kernel:
        kernel.ok(f"import jax.numpy as jnp\na = jnp.ones({GIB}, dtype=jnp.uint8)\na.block_until_ready()", 180)
        reply, text = kernel.run(f"b = jnp.ones({5 * GIB}, dtype=jnp.uint8)\nb.block_until_ready()", timeout=120)
        line = error_line(reply, text)
        print("MEMORY CAP FIGURES " + json.dumps({"jax_line": line}))
        assert "GPU 0: this kernel would pass the notebook's memory cap of 4.0 GiB (the server's)" in line, line
        assert kernel.ok("print(int(a[-1]))").strip() == "1"
