"""DeepSpeed's own code, unchanged, in two GPU ranks with NCCL: ``deepspeed.init_distributed()`` and a ZeRO stage 1
engine from a torch optimizer train on each rank's own worker's GPU, and on in a later cell. Skipped without 2 GPUs
and where deepspeed is not installed (it ships as an sdist: ``DS_BUILD_OPS=0 pip install deepspeed``; its CUDA
accelerator compiles nothing for this)."""

from __future__ import annotations

import importlib.util

import pytest
from IPython.core.interactiveshell import InteractiveShell

from tests.gpu.test_spmd_gpu import WHERE, normalized, run, started, worker_gpus

pytestmark = [
    pytest.mark.skipif(
        importlib.util.find_spec("torch") is None or importlib.util.find_spec("deepspeed") is None,
        reason="needs torch and deepspeed in the workers' environment (DS_BUILD_OPS=0 pip install deepspeed)",
    ),
    pytest.mark.timeout(300),
]

DEEPSPEED_CELL = (
    WHERE
    + """
import torch, deepspeed
deepspeed.init_distributed()                     # NCCL on GPU ranks, from the rank's environment
torch.manual_seed(0)
model = torch.nn.Linear(64, 4)                   # 260 parameters: ZeRO stage 1 gives each rank 130 of their states
optimizer = torch.optim.AdamW(model.parameters(), lr=0.01)
config = {"train_micro_batch_size_per_gpu": 32, "zero_optimization": {"stage": 1}}  # x world size: the global batch
engine, optimizer, _, _ = deepspeed.initialize(model=model, optimizer=optimizer, config=config)
generator = torch.Generator(device=engine.device).manual_seed(1 + engine.global_rank)
for _ in range(5):
    x = torch.randn(32, 64, device=engine.device, generator=generator)
    engine.backward(torch.nn.functional.mse_loss(engine(x), x[:, :4]))
    engine.step()
torch.cuda.synchronize()
(engine.world_size, engine.global_rank, torch.distributed.get_backend(), str(engine.device),
 type(optimizer).__name__, engine.zero_optimization_stage(), optimizer.single_partition_of_fp32_groups[0].numel(),
 engine.global_steps, engine.train_batch_size(), float(sum(p.detach().sum() for p in engine.module.parameters())),
 t_where())
"""
)

MORE = """
x = torch.randn(32, 64, device=engine.device, generator=generator)
engine.backward(torch.nn.functional.mse_loss(engine(x), x[:, :4]))
engine.step()
(engine.global_steps, float(sum(p.detach().sum() for p in engine.module.parameters())))
"""


@pytest.fixture(scope="module")
def shell(loaded_shell: InteractiveShell) -> InteractiveShell:
    return loaded_shell


def test_deepspeed_zero_stage_1_trains_on_two_gpu_ranks_with_nccl(shell: InteractiveShell) -> None:
    """Issue 42 item 6 on GPUs: DeepSpeed's own code, unchanged, in two GPU ranks."""
    import cupy

    if int(cupy.cuda.runtime.getDeviceCount()) < 2:
        pytest.skip("needs 2 GPUs")
    with started(shell, "--gpus 0,1"):
        run(shell, f"%%gpurun spmd -q -o t_ds\n{DEEPSPEED_CELL}")
        values = shell.user_ns["t_ds"].values
        assert [value[:9] for value in values] == [
            (2, rank, "nccl", f"cuda:{rank}", "DeepSpeedZeroOptimizer", 1, 130, 5, 64) for rank in (0, 1)
        ]
        assert values[0][9] == pytest.approx(values[1][9], rel=1e-5)  # the gradients were averaged: equal replicas
        gpus = worker_gpus()
        for value in values:  # each rank computed on its own worker's GPU
            assert normalized(value[10]["uuid"]) == gpus[value[10]["worker_pid"]]
        run(shell, f"%%gpurun spmd -q -o t_ds_more\n{MORE}")
        more = shell.user_ns["t_ds_more"].values
        assert [value[0] for value in more] == [6, 6]
        assert more[0][1] == pytest.approx(more[1][1], rel=1e-5) and more[0][1] != pytest.approx(values[0][9])
