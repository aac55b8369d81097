"""``%%gpurun spmd`` on real GPUs with torch (NCCL): each rank computes on its own worker's GPU, DDP trains, the
peak GPU memory is kept; CPU ranks next to it make a gloo group; a ``DataLoader`` with worker processes runs in a
rank. Skipped without a CUDA GPU (tests/gpu/conftest.py), without torch, and, for two ranks on two GPUs, without a
second GPU. Every test starts its own cluster and stops it (the rank processes go with it)."""

from __future__ import annotations

import importlib.util
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psutil
import pytest
from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output

from gpu_magics import gpus, spmd
from gpu_magics.cluster.control import queries
from gpu_magics.spmd.worker import host

pytestmark = [
    pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="needs torch in the workers' environment"),
    pytest.mark.timeout(300),
]

COLLECTIVE_TIMEOUT = "2m"  # --timeout: a collective that hangs fails the cell in 2 minutes, not 5

# What a rank says about where it runs (the worker is its parent process).
WHERE = """
def t_where():
    import os, torch
    found = {key: os.environ.get(key) for key in (
        "RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "NODE_RANK", "MASTER_ADDR", "MASTER_PORT",
        "CUDA_VISIBLE_DEVICES")}
    found["pid"], found["worker_pid"] = os.getpid(), os.getppid()
    if torch.cuda.is_available():
        found["device"] = torch.cuda.current_device()
        found["uuid"] = str(torch.cuda.get_device_properties(torch.cuda.current_device()).uuid)
    return found
"""

DDP_CELL = (
    WHERE
    + """
import os, torch, torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
t_local = int(os.environ["LOCAL_RANK"])
torch.cuda.set_device(t_local)
torch.manual_seed(0)
t_model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 1))
t_ddp = DistributedDataParallel(t_model.cuda(), device_ids=[t_local])
t_opt = torch.optim.SGD(t_ddp.parameters(), lr=0.05)
t_gen = torch.Generator(device="cuda").manual_seed(1 + dist.get_rank())
t_x = torch.randn(512, 64, device="cuda", generator=t_gen)
t_y = t_x[:, :4].sum(dim=1, keepdim=True)
t_losses = []
for _ in range(30):
    t_opt.zero_grad(set_to_none=True)
    t_loss = torch.nn.functional.mse_loss(t_ddp(t_x), t_y)
    t_loss.backward()
    t_opt.step()
    t_losses.append(t_loss.item())
t_sum = torch.full((4,), float(dist.get_rank() + 1), device="cuda")
dist.all_reduce(t_sum)
torch.cuda.synchronize()
{**t_where(), "losses": t_losses, "sum": t_sum.tolist(), "backend": str(dist.get_backend()),
 "world": dist.get_world_size(), "rank": dist.get_rank()}
"""
)

ALL_REDUCE_CELL = (
    WHERE
    + """
import os, torch, torch.distributed as dist
if torch.cuda.is_available():
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
t_device = "cuda" if torch.cuda.is_available() else "cpu"
t_sum = torch.full((8,), float(dist.get_rank() + 1), device=t_device)
dist.all_reduce(t_sum)
{**t_where(), "sum": t_sum.tolist(), "backend": str(dist.get_backend()), "world": dist.get_world_size(),
 "cuda": torch.cuda.is_available()}
"""
)

WEIGHTS = "t_weights = float(sum(p.detach().double().sum() for p in t_model.parameters()))"

DATALOADER_CELL = """
import os, torch

class t_Squares(torch.utils.data.Dataset):
    def __len__(self):
        return 64

    def __getitem__(self, index):
        return torch.tensor([float(index * index)]), os.getpid()

t_loader = torch.utils.data.DataLoader(t_Squares(), batch_size=8, num_workers=2)
t_total, t_loader_pids = torch.zeros(1, device="cuda"), set()
for t_batch, t_pids in t_loader:
    t_total += t_batch.cuda().sum()
    t_loader_pids.update(int(pid) for pid in t_pids)
torch.cuda.synchronize()
(float(t_total), sorted(t_loader_pids), os.getpid())
"""


@pytest.fixture(scope="module")
def shell(loaded_shell: InteractiveShell) -> InteractiveShell:
    return loaded_shell


@pytest.fixture(scope="module")
def gpu_count() -> int:
    import cupy

    return int(cupy.cuda.runtime.getDeviceCount())


def run(shell: InteractiveShell, code: str) -> tuple[Any, str]:
    """Run a cell; its result and what it printed (the cell must succeed)."""
    with capture_output() as captured:
        result = shell.run_cell(code)
    shown = captured.stdout + captured.stderr + "\n".join(o.data.get("text/plain", "") for o in captured.outputs)
    assert result.success, shown
    return result.result, shown


@contextmanager
def started(shell: InteractiveShell, line: str) -> Iterator[None]:
    """A cluster for one test (replacing any other), stopped afterwards; the rank processes must end with it."""
    run(shell, f"%gpucluster {line} --replace")
    rank_pids: list[int] = []
    try:
        yield
        for owners in queries.require_client().run(host.rank_pids).values():  # owner -> pid, on each worker
            rank_pids.extend(owners.values())
    finally:
        run(shell, "%gpucluster stop")
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and any(psutil.pid_exists(pid) for pid in rank_pids):
        time.sleep(0.1)
    assert not [pid for pid in rank_pids if psutil.pid_exists(pid)], "rank processes outlived %gpucluster stop"


def normalized(uuid: str) -> str:
    """NVML says ``GPU-6f3c...``, torch ``6f3c...``."""
    return uuid.strip().lower().removeprefix("gpu-")


def listed_uuid(entry: str) -> str:
    """A rank's ``CUDA_VISIBLE_DEVICES`` entry as a normalized UUID: a number is NVML's (PCI order), as the rank
    host writes GPUs that the workers name by UUID."""
    if not entry.isdigit():
        return normalized(entry)
    from gpu_magics.monitor.nvml import NvmlSource

    source = NvmlSource(visible_devices=None)
    try:
        readings, _ = source.read(slow=False)
    finally:
        source.close()
    return normalized(next(reading.uuid for reading in readings if reading.nvml_index == int(entry)))


def worker_gpus() -> dict[int, str]:
    """Worker pid -> the normalized UUID of the GPU its CUDA_VISIBLE_DEVICES names first (dask-cuda's own GPU)."""
    by_id = {device.cuda_id: device.uuid for device in gpus.inventory().devices()}
    client = queries.require_client()
    pids = client.run(os.getpid)
    firsts = client.run(lambda: os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")[0])
    found = {}
    for address, first in firsts.items():
        uuid = first if first.upper().startswith("GPU-") else by_id[first]
        found[int(pids[address])] = normalized(uuid)
    return found


def check_torchrun_env(where: dict[str, Any], rank: int, world: int) -> None:
    assert where["RANK"] == str(rank) and where["WORLD_SIZE"] == str(world)
    assert where["LOCAL_RANK"] == str(rank) and where["LOCAL_WORLD_SIZE"] == str(world)  # one host
    assert where["NODE_RANK"] == "0" and where["MASTER_ADDR"] and int(where["MASTER_PORT"]) > 0


def test_ddp_on_the_one_gpu_worker(shell: InteractiveShell) -> None:
    with started(shell, "--gpus 0"):
        line = f"spmd --init torch --timeout {COLLECTIVE_TIMEOUT} -o t_ddp_run"
        value, shown = run(shell, f"%%gpurun {line}\n{DDP_CELL}")
        assert "nccl group of 1" in shown
        assert value["backend"] == "nccl" and value["world"] == 1 and value["rank"] == 0
        check_torchrun_env(value, 0, 1)
        assert value["sum"] == [1.0] * 4
        # the rank computes on its worker's GPU, the only one it sees
        gpu_of = worker_gpus()
        assert value["worker_pid"] in gpu_of
        assert normalized(value["uuid"]) == gpu_of[value["worker_pid"]]
        assert listed_uuid(value["CUDA_VISIBLE_DEVICES"]) == gpu_of[value["worker_pid"]]
        assert value["device"] == 0
        losses = value["losses"]
        assert losses[-1] < 0.5 * losses[0], losses
        result = shell.user_ns["t_ddp_run"]
        (outcome,) = result.outcomes
        assert outcome.state == "done" and outcome.error is None and outcome.value == value
        assert outcome.peak_memory is not None and outcome.peak_memory > 0
        assert outcome.seconds is not None and 0 < outcome.seconds <= result.wall
        assert "1 rank on 1 host (1 GPU)" in result.world
        # the rank keeps its variables (the model) and its group for the next cell
        again, _ = run(shell, "%%gpurun spmd -q\nfloat(t_ddp.module[0].weight.sum()), dist.is_initialized()")
        assert again[1] is True


def test_dataloader_with_worker_processes_in_a_rank(shell: InteractiveShell) -> None:
    with started(shell, "--gpus 0"):
        (total, loader_pids, rank_pid), _ = run(shell, f"%%gpurun spmd -q\n{DATALOADER_CELL}")
        assert total == float(sum(index * index for index in range(64)))
        assert len(loader_pids) == 2 and rank_pid not in loader_pids
        # again: the loader's processes come and go, the rank stays
        again, _ = run(shell, f"%%gpurun spmd -q\n{DATALOADER_CELL}")
        assert again[0] == total and again[2] == rank_pid


def test_gloo_between_two_cpu_ranks(shell: InteractiveShell) -> None:
    with started(shell, "--cpu-workers 2"):
        value, shown = run(
            shell, f"%%gpurun spmd --init torch --timeout {COLLECTIVE_TIMEOUT} -o t_cpu\n{ALL_REDUCE_CELL}"
        )
        assert "gloo group of 2" in shown
        result = shell.user_ns["t_cpu"]
        assert [outcome.state for outcome in result.outcomes] == ["done", "done"]
        for rank, found in enumerate(result.values):
            assert found["backend"] == "gloo" and found["world"] == 2
            check_torchrun_env(found, rank, 2)
            assert found["sum"] == [3.0] * 8  # 1 + 2
            assert found["CUDA_VISIBLE_DEVICES"] == "" and found["cuda"] is False  # a CPU rank sees no GPU
            assert found.get("uuid") is None
        assert value == result.values[0]
        assert len({found["worker_pid"] for found in result.values}) == 2
        # a 'torch.ones' all_reduce, as a notebook writes it
        ones, _ = run(shell, "%%gpurun spmd -q\nt_one = torch.ones(3)\ndist.all_reduce(t_one)\nt_one.tolist()")
        assert ones == [2.0, 2.0, 2.0]


def test_two_gpu_ranks_each_on_its_own_gpu(shell: InteractiveShell, gpu_count: int) -> None:
    if gpu_count < 2:
        pytest.skip("needs 2 GPUs")
    with started(shell, "--gpus 0,1"):
        run(shell, f"%%gpurun spmd --init torch --timeout {COLLECTIVE_TIMEOUT} -o t_two -q\n{ALL_REDUCE_CELL}")
        result = shell.user_ns["t_two"]
        values = result.values
        assert len(values) == 2 and [outcome.state for outcome in result.outcomes] == ["done", "done"]
        gpu_of = worker_gpus()
        for rank, found in enumerate(values):
            assert found["backend"] == "nccl" and found["world"] == 2 and found["cuda"] is True
            check_torchrun_env(found, rank, 2)
            assert found["sum"] == [3.0] * 8
            # CUDA_VISIBLE_DEVICES lists the host's rank GPUs in local-rank order: LOCAL_RANK is the worker's GPU
            listed = [listed_uuid(item) for item in found["CUDA_VISIBLE_DEVICES"].split(",")]
            assert listed == [gpu_of[other["worker_pid"]] for other in values]
            assert found["device"] == rank
            assert normalized(found["uuid"]) == gpu_of[found["worker_pid"]]
        assert len({normalized(found["uuid"]) for found in values}) == 2
        # DDP across the two GPUs: each rank trains on its own data, the gradients are averaged, so the ranks keep
        # the same weights; pull brings a variable back from every rank
        run(shell, f"%%gpurun spmd -q\n{DDP_CELL}\n{WEIGHTS}")
        first, second = spmd.pull("t_weights")
        assert first == pytest.approx(second, rel=1e-6)
        assert spmd.pull("t_weights", rank=1) == second


def test_a_rank_that_dies_in_an_nccl_all_reduce_gives_a_new_world_with_its_group(
    shell: InteractiveShell, gpu_count: int
) -> None:
    """Issue 42 item 1 on GPUs: rank 1 ends itself during an all_reduce; the cell fails naming its exit code, and
    the next cell starts every rank anew, makes the NCCL group again and all-reduces on both GPUs."""
    if gpu_count < 2:
        pytest.skip("needs 2 GPUs")
    with started(shell, "--gpus 0,1"):
        run(shell, f"%%gpurun spmd --init torch --timeout {COLLECTIVE_TIMEOUT} -q\nt_kept = 1")
        dying = (
            "import os, torch, torch.distributed as dist\n"
            "if dist.get_rank() == 1:\n"
            "    os._exit(3)\n"
            "t = torch.ones(4, device='cuda')\n"
            "dist.all_reduce(t)\n"
            "torch.cuda.synchronize()\n"
        )
        with capture_output() as captured:
            failed = shell.run_cell(f"%%gpurun spmd -q\n{dying}")
        assert not failed.success
        assert "the rank process ended (exit code 3)" in captured.stdout + captured.stderr
        value, shown = run(
            shell,
            "%%gpurun spmd -q\nimport torch, torch.distributed as dist\nt = torch.ones(4, device='cuda')\n"
            "dist.all_reduce(t)\n(t.tolist(), 't_kept' in globals(), dist.get_backend())",
        )
        assert value == ([2.0] * 4, False, "nccl")
        said = [line for line in shown.splitlines() if "every rank starts anew" in line]
        assert len(said) == 1 and "(exit code 3)" in said[0] and said[0].endswith("(--init torch)"), shown


JAX_CELL = """
import jax, jax.numpy as jnp
t_x = jnp.ones((2048, 2048))
(float((t_x @ t_x).sum()), jax.devices()[0].platform)
"""


def test_jax_ranks_leave_room_on_the_gpus_their_workers_use(shell: InteractiveShell, gpu_count: int) -> None:
    """Issue 42 item 4: after --init jax and a JAX operation, each GPU holds well under half its memory (JAX would
    preallocate 75%), and the group line says once why."""
    if importlib.util.find_spec("jax") is None:
        pytest.skip("needs jax (jax[cuda12]) in the workers' environment")
    import pynvml

    with started(shell, "--gpus 0,1" if gpu_count >= 2 else "--gpus 0"):
        value, shown = run(shell, f"%%gpurun spmd --init jax --timeout {COLLECTIVE_TIMEOUT}\n{JAX_CELL}")
        if value[1] != "gpu":
            pytest.skip("jax has no CUDA backend here (pip install 'jax[cuda12]')")
        assert value[0] == 2048.0**3
        final = shown[shown.rindex("spmd · ") :]  # the table as it ends (a live table redraws in place)
        assert final.count("XLA_PYTHON_CLIENT_PREALLOCATE=false") == 1, shown
        pynvml.nvmlInit()
        for index in range(min(gpu_count, 2)):
            memory = pynvml.nvmlDeviceGetMemoryInfo(pynvml.nvmlDeviceGetHandleByIndex(index))
            assert memory.used < 0.5 * memory.total, (index, memory.used, memory.total)


ACCELERATE_CELL = """
import torch
from accelerate import Accelerator
torch.manual_seed(0)
accelerator = Accelerator()
model = torch.nn.Linear(64, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
data = torch.utils.data.TensorDataset(torch.randn(256, 64), torch.randn(256, 1))
loader = torch.utils.data.DataLoader(data, batch_size=32)
model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
for x, y in loader:
    optimizer.zero_grad()
    accelerator.backward(torch.nn.functional.mse_loss(model(x), y))
    optimizer.step()
(str(accelerator.distributed_type), accelerator.num_processes, str(accelerator.device),
 accelerator.gather(torch.tensor([accelerator.process_index], device=accelerator.device)).tolist(),
 float(sum(p.detach().sum() for p in model.parameters())))
"""


def test_accelerate_trains_on_two_gpu_ranks_with_nccl(shell: InteractiveShell, gpu_count: int) -> None:
    """Issue 42 item 6 on GPUs: HuggingFace Accelerate's own code, unchanged, in two GPU ranks."""
    if gpu_count < 2:
        pytest.skip("needs 2 GPUs")
    if importlib.util.find_spec("accelerate") is None:
        pytest.skip("needs accelerate in the workers' environment (pip install accelerate)")
    with started(shell, "--gpus 0,1"):
        run(shell, f"%%gpurun spmd -q -o t_acc\n{ACCELERATE_CELL}")
        values = shell.user_ns["t_acc"].values
        assert [value[:4] for value in values] == [
            ("DistributedType.MULTI_GPU", 2, f"cuda:{rank}", [0, 1]) for rank in (0, 1)
        ]
        assert values[0][4] == pytest.approx(values[1][4], rel=1e-5)


LIGHTNING_CELL = """
import os, torch, lightning as L
fabric = L.Fabric(devices=int(os.environ["LOCAL_WORLD_SIZE"]), num_nodes=1, strategy="ddp")
fabric.launch()
t_fmodel = torch.nn.Linear(64, 1)
t_fmodel, t_fopt = fabric.setup(t_fmodel, torch.optim.SGD(t_fmodel.parameters(), lr=0.1))
(fabric.world_size, fabric.global_rank, str(fabric.device),
 fabric.all_gather(torch.tensor([fabric.global_rank], device=fabric.device)).flatten().tolist())
"""

TRAINER_FIT = """
import os, torch, lightning as L
if "t_tiny" not in globals():
    class t_Tiny(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.Linear(64, 1)

        def training_step(self, batch, _):
            return torch.nn.functional.mse_loss(self.layer(batch[0]), batch[1])

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.05)

    t_tiny = t_Tiny()
    t_data = torch.utils.data.DataLoader(
        torch.utils.data.TensorDataset(torch.randn(256, 64), torch.randn(256, 1)), batch_size=32)
t_at_start = os.environ.get("WORLD_SIZE")
t_trainer = L.Trainer(devices=int(os.environ["LOCAL_WORLD_SIZE"]), strategy="ddp", max_epochs=1, logger=False,
                      enable_progress_bar=False, enable_model_summary=False, enable_checkpointing=False)
t_trainer.fit(t_tiny, t_data)
t_after = os.environ.get("WORLD_SIZE")
(t_at_start, t_trainer.world_size, t_trainer.global_rank, str(t_trainer.strategy.root_device), t_after)
"""


def test_lightning_fabric_and_trainer_twice_on_two_gpu_ranks(shell: InteractiveShell, gpu_count: int) -> None:
    """Lightning Fabric launching nothing, and Trainer.fit in two cells on NCCL ranks: torchrun's environment
    (``TORCHELASTIC_RUN_ID``) makes Lightning see a torchrun launch, so its teardown leaves ``WORLD_SIZE``."""
    if gpu_count < 2:
        pytest.skip("needs 2 GPUs")
    if importlib.util.find_spec("lightning") is None:
        pytest.skip("needs lightning in the workers' environment (pip install lightning)")
    with started(shell, "--gpus 0,1"):
        run(shell, f"%%gpurun spmd -q -o t_fabric\n{LIGHTNING_CELL}")
        assert shell.user_ns["t_fabric"].values == [(2, rank, f"cuda:{rank}", [0, 1]) for rank in (0, 1)]
        for _ in range(2):
            run(shell, f"%%gpurun spmd -q -o t_fit\n{TRAINER_FIT}")
            assert shell.user_ns["t_fit"].values == [("2", 2, rank, f"cuda:{rank}", "2") for rank in (0, 1)]
