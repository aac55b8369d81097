"""DeepSpeed's own code, unchanged, in SPMD ranks on a real 2-worker CPU cluster (gloo) from a real IPython shell:
``deepspeed.init_distributed()`` and a ZeRO stage 1 engine from a torch optimizer train a few steps, and the engine
trains on in a later cell. Skipped where deepspeed is not installed (it ships as an sdist: ``DS_BUILD_OPS=0 pip
install deepspeed``). On CPU ranks DeepSpeed's CPU accelerator picks gloo and compiles its shared-memory op with the
system's C++ compiler the first time (26-45 s on 2 cores; cached in ``~/.cache/torch_extensions``)."""

from __future__ import annotations

import importlib.util
import shutil
from collections.abc import Iterator

import pytest
from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output

from tests.test_gpurun import NO_GPU, inventory
from tests.test_spmd_libraries import spmd

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        importlib.util.find_spec("torch") is None or importlib.util.find_spec("deepspeed") is None,
        reason="deepspeed is not installed (DS_BUILD_OPS=0 pip install deepspeed)",
    ),
    pytest.mark.skipif(shutil.which("c++") is None, reason="DeepSpeed's CPU accelerator compiles an op: needs c++"),
]

DEEPSPEED = """
import torch, deepspeed
deepspeed.init_distributed()                     # the group from the rank's environment: gloo on CPU ranks
torch.manual_seed(0)
model = torch.nn.Linear(16, 4)                   # 68 parameters: ZeRO stage 1 gives each rank 34 of their states
optimizer = torch.optim.AdamW(model.parameters(), lr=0.01)
config = {"train_micro_batch_size_per_gpu": 8, "zero_optimization": {"stage": 1}}  # x world size: the global batch
engine, optimizer, _, _ = deepspeed.initialize(model=model, optimizer=optimizer, config=config)
generator = torch.Generator().manual_seed(1 + engine.global_rank)
for _ in range(3):
    x = torch.randn(8, 16, generator=generator)
    loss = torch.nn.functional.mse_loss(engine(x), x[:, :4])
    engine.backward(loss)
    engine.step()
(engine.world_size, engine.global_rank, torch.distributed.get_backend(), type(optimizer).__name__,
 engine.zero_optimization_stage(), optimizer.single_partition_of_fp32_groups[0].numel(), engine.global_steps,
 engine.train_batch_size(), float(sum(p.detach().sum() for p in engine.module.parameters())))
"""

MORE = """
deepspeed.init_distributed()                     # again: the group is there, nothing is made anew
x = torch.randn(8, 16, generator=generator)
engine.backward(torch.nn.functional.mse_loss(engine(x), x[:, :4]))
engine.step()
(engine.global_steps, float(sum(p.detach().sum() for p in engine.module.parameters())))
"""


@pytest.fixture(scope="module")
def shell(loaded_shell: InteractiveShell) -> Iterator[InteractiveShell]:
    with inventory(NO_GPU), capture_output():
        loaded_shell.run_line_magic("gpucluster", "--replace --cpu-workers 2 --name spmd-deepspeed")
    try:
        yield loaded_shell
    finally:
        with capture_output():
            loaded_shell.run_line_magic("gpucluster", "stop")


@pytest.mark.timeout(600)  # the first run on a machine compiles DeepSpeed's shared-memory op
def test_deepspeed_zero_stage_1_trains_on_gloo_ranks_and_again_in_a_later_cell(shell: InteractiveShell) -> None:
    values = spmd(shell, "", DEEPSPEED).values
    assert [value[:8] for value in values] == [
        (2, rank, "gloo", "DeepSpeedZeroOptimizer", 1, 34, 3, 16) for rank in (0, 1)
    ]
    assert values[0][8] == pytest.approx(values[1][8])  # the ranks' gradients were averaged: equal replicas
    more = spmd(shell, "", MORE).values
    assert [value[0] for value in more] == [4, 4]
    assert more[0][1] == pytest.approx(more[1][1]) and more[0][1] != pytest.approx(values[0][8])


def test_deepspeed_takes_the_group_that_init_torch_made(shell: InteractiveShell) -> None:
    with capture_output():
        shell.run_line_magic("gpurun", "spmd --reset")
    made = spmd(shell, "--init torch", "import torch.distributed as dist\nid(dist.group.WORLD)").values
    values = spmd(shell, "", DEEPSPEED + "\nid(torch.distributed.group.WORLD)").values
    assert values == made  # init_distributed kept the group that --init torch made, and the engine trained in it


BUILT = """
import os, torch.utils.cpp_extension as extensions
from deepspeed.ops.op_builder.cpu import ShareMemCommBuilder
built = os.path.join(extensions._get_build_directory(ShareMemCommBuilder.NAME, False), ShareMemCommBuilder.NAME + ".so")
os.stat(built).st_mtime_ns if os.path.exists(built) else None
"""


def test_deepspeeds_op_is_built_once_and_new_rank_processes_load_it(shell: InteractiveShell) -> None:
    spmd(shell, "", DEEPSPEED)  # built here, or on an earlier run on this machine
    first = spmd(shell, "", BUILT).values
    assert first[0] is not None and len(set(first)) == 1  # one build, in one place, for both ranks
    with capture_output():
        shell.run_line_magic("gpurun", "spmd --reset")  # new rank processes, as a later kernel's
    spmd(shell, "", DEEPSPEED)
    assert spmd(shell, "", BUILT).values == first  # loaded from the cache, not built again
