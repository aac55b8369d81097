"""Library code, unchanged, in SPMD ranks on a real 2-worker CPU cluster (gloo) from a real IPython shell:
HuggingFace Accelerate's ``Accelerator()`` (prepare, backward, a few steps, gather of a metric, again in a later
cell), Lightning Fabric (``launch()`` launching nothing), Lightning's ``Trainer.fit`` twice in two cells (which a
launcher that starts processes per call cannot do) with ``WORLD_SIZE`` left in place by its teardown (the ranks have
torchrun's environment), and the rank environment put back before every cell (a library's teardown may change it)."""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from typing import Any

import pytest
from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output

from tests.test_gpurun import NO_GPU, inventory

pytestmark = pytest.mark.slow

HAS_TORCH = importlib.util.find_spec("torch") is not None
HAS_ACCELERATE = HAS_TORCH and importlib.util.find_spec("accelerate") is not None
HAS_LIGHTNING = HAS_TORCH and importlib.util.find_spec("lightning") is not None
needs_lightning = pytest.mark.skipif(not HAS_LIGHTNING, reason="lightning is not installed (pip install lightning)")


@pytest.fixture(scope="module")
def shell(loaded_shell: InteractiveShell) -> Iterator[InteractiveShell]:
    with inventory(NO_GPU), capture_output():
        loaded_shell.run_line_magic("gpucluster", "--replace --cpu-workers 2 --name spmd-libraries")
    try:
        yield loaded_shell
    finally:
        with capture_output():
            loaded_shell.run_line_magic("gpucluster", "stop")


def spmd(shell: InteractiveShell, line: str, body: str) -> Any:
    """Run ``%%gpurun spmd LINE`` as a cell that must succeed; the ``SpmdResult`` it keeps (``-o``)."""
    with capture_output() as captured:
        result = shell.run_cell(f"%%gpurun spmd -q -o t_result {line}\n{body}")
    assert result.success, captured.stdout + captured.stderr
    return shell.user_ns["t_result"]


def test_the_rank_environment_is_put_back_before_every_cell(shell: InteractiveShell) -> None:
    original = spmd(shell, "", "import os\n(os.environ['WORLD_SIZE'], os.environ['MASTER_PORT'])").values
    spmd(shell, "", "import os\ndel os.environ['WORLD_SIZE']\nos.environ['MASTER_PORT'] = '1'")  # as a teardown does
    again = spmd(shell, "", "import os\n(os.environ.get('WORLD_SIZE'), os.environ['MASTER_PORT'])").values
    assert again == original and original[0][0] == "2"


ACCELERATE = """
import torch
from accelerate import Accelerator
torch.manual_seed(0)
accelerator = Accelerator()
model = torch.nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
data = torch.utils.data.TensorDataset(torch.randn(64, 4), torch.randn(64, 1))
loader = torch.utils.data.DataLoader(data, batch_size=8)
model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
for x, y in loader:
    optimizer.zero_grad()
    loss = torch.nn.functional.mse_loss(model(x), y)
    accelerator.backward(loss)
    optimizer.step()
losses = accelerator.gather(loss.detach().reshape(1))
(str(accelerator.distributed_type), accelerator.num_processes, accelerator.process_index, len(losses),
 [float(p.detach().sum()) for p in model.parameters()])
"""


@pytest.mark.skipif(not HAS_ACCELERATE, reason="accelerate is not installed (pip install accelerate)")
def test_accelerates_own_code_trains_on_gloo_ranks_and_again_in_a_later_cell(shell: InteractiveShell) -> None:
    values = spmd(shell, "", ACCELERATE).values
    assert [value[:4] for value in values] == [("DistributedType.MULTI_CPU", 2, rank, 2) for rank in (0, 1)]
    assert values[0][4] == pytest.approx(values[1][4])  # DDP kept the two replicas equal
    # the accelerator, its model and the group live on in the ranks: a later cell goes on with them
    more = "for x, y in loader:\n    optimizer.zero_grad()\n    accelerator.backward(model(x).pow(2).mean())\n"
    more += "    optimizer.step()\naccelerator.gather(torch.tensor([accelerator.process_index])).tolist()"
    assert spmd(shell, "", more).values == [[0, 1], [0, 1]]


FABRIC = """
import os, torch, lightning as L
hosts = int(os.environ["WORLD_SIZE"]) // int(os.environ["LOCAL_WORLD_SIZE"])
fabric = L.Fabric(devices=int(os.environ["LOCAL_WORLD_SIZE"]), num_nodes=hosts, strategy="ddp")
fabric.launch()  # the ranks are the processes: it launches nothing
model = torch.nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
model, optimizer = fabric.setup(model, optimizer)
for _ in range(3):
    optimizer.zero_grad()
    fabric.backward(model(torch.randn(8, 4)).pow(2).mean())
    optimizer.step()
(fabric.world_size, fabric.global_rank, fabric.all_gather(torch.tensor([fabric.global_rank])).flatten().tolist())
"""

TRAINER = """
import os, torch, lightning as L

class Tiny(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)

    def training_step(self, batch, _):
        x, y = batch
        return torch.nn.functional.mse_loss(self.layer(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)

tiny = Tiny()
data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(64, 4), torch.randn(64, 1)), batch_size=8)
"""

FIT = """
at_start = os.environ.get("WORLD_SIZE")
trainer = L.Trainer(devices=int(os.environ["LOCAL_WORLD_SIZE"]), strategy="ddp", max_epochs=1, logger=False,
                    enable_progress_bar=False, enable_model_summary=False, enable_checkpointing=False)
trainer.fit(tiny, data)
(at_start, trainer.world_size, trainer.global_rank, float(tiny.layer.weight.sum()), os.environ.get("WORLD_SIZE"))
"""


@needs_lightning
def test_lightning_fabric_launches_nothing_and_trains_on_the_ranks(shell: InteractiveShell) -> None:
    values = spmd(shell, "", FABRIC).values
    assert values == [(2, 0, [0, 1]), (2, 1, [0, 1])]


@needs_lightning
def test_lightning_trainer_fits_in_one_cell_and_again_in_the_next(shell: InteractiveShell) -> None:
    spmd(shell, "", TRAINER)
    first = spmd(shell, "", FIT).values
    second = spmd(shell, "", FIT).values
    for values in (first, second):
        assert [value[:3] for value in values] == [("2", 2, 0), ("2", 2, 1)]
        assert [value[4] for value in values] == ["2", "2"]  # torchrun's launch seen: its teardown left WORLD_SIZE
        assert values[0][3] == pytest.approx(values[1][3])  # DDP kept the replicas equal
    assert second[0][3] != first[0][3]  # the second fit trained the same model further
