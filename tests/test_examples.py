"""The example notebooks: their shape, the runner's rewrites, and each one run top to bottom on the CPU.

The slow tests execute every example (the notebooks ``EXPECTED`` lists, each tracked in ``examples/``; another
notebook there is a user's, not an example) at its small size in a real kernel (nbclient), as
``scripts/run_examples.py`` does, and check what the outputs say.
"""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path
from types import ModuleType

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_notebook

ROOT = Path(__file__).resolve().parent.parent

# Text each notebook's outputs must contain; a tuple means any one of its strings (CPU or GPU wording).
EXPECTED: dict[str, list[str | tuple[str, ...]]] = {
    "quickstart": ["cpu-threads", "agrees"],
    "speed-cubing": [
        ("the GPU steps run on the CPU instead", "the GPU steps run on GPUs"),
        "cpu-single ran on the whole",
        "of the article's array",
        "every backend agrees",
        "stopped cluster",
    ],
    "first-steps": [
        ("falling back to NumPy's RandomState", "the chunks are CuPy arrays"),
        "Wall time",
        "every backend agrees",
    ],
    "spmd-training": [
        ("2 CPU ranks with gloo between them", "NCCL between them"),
        "torch.distributed: ",
        "the replicas agree",
        ("Accelerate, rank 1: ('DistributedType.MULTI_", "accelerate is not installed"),
        ("Lightning Fabric, rank 1: (1, ", "lightning is not installed"),
        ("the last fit's teardown left torchrun's variables in place", "lightning is not installed"),
        ("DeepSpeed, rank 1: (", "DeepSpeed on CPU ranks is off", "deepspeed is not installed"),
        "RuntimeError: rank",
        ("jax.distributed: ", "jax on every rank: False"),
        "stopped cluster",
    ],
    "linear-algebra": [
        "Task graph of",
        "largest singular value",
        "SVD: every backend agrees",
        "product: every backend agrees",
        "stopped cluster",
    ],
    "custom-kernels": [
        "[-3.  -0.5  0.   0.5  3. ]",
        "the same memory",
        "a[0] = 42.0",
        ("the gpu and multi-gpu cells ran on the CPU", "The kernel ran as CUDA code"),
        "every backend agrees",
        "stopped cluster",
    ],
}


# The examples are the notebooks listed above, never whatever lies in examples/: a notebook a user saved there is
# theirs, not an example (scripts/start.sh serves a git-ignored copy, notebooks/, for them to work in).
EXAMPLES = [ROOT / "examples" / f"{name}.ipynb" for name in EXPECTED]


def tracked_examples(root: Path) -> set[str] | None:
    """The names of the notebooks git tracks in ``root/examples`` (``None`` outside a git checkout)."""
    try:
        listed = subprocess.run(
            ["git", "ls-files", "-z", "--", "examples"], cwd=root, capture_output=True, text=True, timeout=60
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if listed.returncode != 0:
        return None
    paths = [Path(name) for name in listed.stdout.split("\0") if name]
    return {path.stem for path in paths if path.parent == Path("examples") and path.suffix == ".ipynb"}


def listing_problems(root: Path, expected: Iterable[str]) -> list[str]:
    """What is wrong with the list of examples against ``root``'s checkout: a listed one missing, a tracked one
    unlisted (an untracked notebook in examples/ is none of the suite's business)."""
    problems = [
        f"examples/{name}.ipynb is listed in tests/test_examples.py but missing (git checkout examples/{name}.ipynb)"
        for name in expected
        if not (root / "examples" / f"{name}.ipynb").is_file()
    ]
    tracked = tracked_examples(root)
    problems += [
        f"examples/{name}.ipynb is tracked but not listed in tests/test_examples.py's EXPECTED"
        for name in sorted((tracked or set()) - set(expected))
    ]
    return problems


def _load_runner() -> ModuleType:
    spec = importlib.util.spec_from_file_location("run_examples", ROOT / "scripts" / "run_examples.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("run_examples", module)
    spec.loader.exec_module(module)
    return module


runner = _load_runner()


def _read(path: Path) -> nbformat.NotebookNode:
    return nbformat.read(path, as_version=4)


def _first_line(cell: nbformat.NotebookNode) -> str:
    return cell.source.splitlines()[0] if cell.source else ""


def test_every_example_is_listed_here() -> None:
    assert not listing_problems(ROOT, EXPECTED), "\n".join(listing_problems(ROOT, EXPECTED))


def test_an_untracked_notebook_in_examples_is_no_example_and_a_missing_one_is_named(tmp_path: Path) -> None:
    def git(*args: str) -> None:
        subprocess.run(["git", *args], cwd=tmp_path, check=True, capture_output=True, timeout=60)

    (tmp_path / "examples").mkdir()
    for name in ("quickstart", "first-steps"):
        (tmp_path / "examples" / f"{name}.ipynb").write_text("{}")
    (tmp_path / "examples" / "executed").mkdir()
    (tmp_path / "examples" / "executed" / "quickstart.ipynb").write_text("{}")  # a stored run: no example
    git("init", "-q")
    git("add", "examples")
    (tmp_path / "examples" / "Untitled.ipynb").write_text("{}")  # saved by a user in JupyterLab, never added
    assert tracked_examples(tmp_path) == {"quickstart", "first-steps"}
    assert listing_problems(tmp_path, ["quickstart", "first-steps"]) == []
    (tmp_path / "examples" / "first-steps.ipynb").unlink()
    assert listing_problems(tmp_path, ["quickstart", "first-steps"]) == [
        "examples/first-steps.ipynb is listed in tests/test_examples.py but missing "
        "(git checkout examples/first-steps.ipynb)"
    ]
    assert listing_problems(tmp_path, ["first-steps"])[1:] == [
        "examples/quickstart.ipynb is tracked but not listed in tests/test_examples.py's EXPECTED"
    ]


@pytest.mark.parametrize("path", EXAMPLES, ids=[path.stem for path in EXAMPLES])
def test_example_shape(path: Path) -> None:
    nb = _read(path)
    nbformat.validate(nb)
    code = [cell for cell in nb.cells if cell.cell_type == "code"]
    assert nb.cells[0].cell_type == "markdown" and nb.cells[0].source.startswith("# ")
    assert code[0].source.strip() == "%load_ext gpu_magics"
    assert all(not cell.outputs and cell.execution_count is None for cell in code), "outputs are stored"
    size = runner.find_size(nb)  # exactly one size line, with the GPU size next to it
    assert size.small < size.full
    assert any(_first_line(cell).startswith("%%gpurun") for cell in code)


def test_set_size_full_and_scaled() -> None:
    nb = _read(ROOT / "examples" / "speed-cubing.ipynb")
    assert runner.set_size(nb, full=False) == ("N", 4_000)
    source = nb.cells[runner.find_size(nb).cell].source
    assert runner.set_size(nb, full=True) == ("N", 100_000)
    changed = nb.cells[runner.find_size(nb).cell].source
    assert changed.startswith("N = 100_000  # on GPUs: N = 100_000 (80 GB")
    assert changed.splitlines()[0].endswith("[set by run_examples.py: full size; small: 4_000]")
    assert changed.splitlines()[1:] == source.splitlines()[1:]  # CHUNK and the rest follow N
    assert runner.find_size(nb).full == 100_000  # still recognizable, so it can be set again

    nb = _read(ROOT / "examples" / "speed-cubing.ipynb")
    assert runner.set_size(nb, full=True, scale=0.5) == ("N", 50_000)
    nb = _read(ROOT / "examples" / "speed-cubing.ipynb")
    assert runner.set_size(nb, full=False, scale=0.5) == ("N", 2_000)


def test_find_size_needs_one_line() -> None:
    with pytest.raises(ValueError, match="found 0"):
        runner.find_size(new_notebook(cells=[new_code_cell("N = 10")]))
    twice = "N = 1  # on GPUs: N = 2\nM = 1  # on GPUs: M = 2"
    with pytest.raises(ValueError, match="found 2"):
        runner.find_size(new_notebook(cells=[new_code_cell(twice)]))


def test_skip_cpu_single_follows_the_cluster() -> None:
    cells = [
        "%%gpurun --compare all -o before\nx",
        "%gpucluster $CLUSTER_ARGS",
        "%gpucluster status",
        "%%gpurun --compare all --rtol 1e-2\nx",
        "%%gpurun --compare cpu-single,cpu-threads,gpu\nx",
        "%gpucluster stop",
        "%%gpurun --compare all\nx",
        "%%gpurun cpu-single\nx",
    ]
    nb = new_notebook(cells=[new_code_cell(source) for source in cells])
    assert runner.skip_cpu_single(nb, gpu=True) == 4
    lines = [_first_line(cell) for cell in nb.cells]
    assert lines[0] == "%%gpurun --compare cpu-threads,gpu -o before"
    assert lines[3] == "%%gpurun --compare cpu-threads,gpu,multi-gpu --rtol 1e-2"
    assert lines[4] == "%%gpurun --compare cpu-threads,gpu"
    assert lines[6] == "%%gpurun --compare cpu-threads,gpu"
    assert lines[7] == "%%gpurun cpu-single"  # single-backend cells are the notebook's to keep small
    assert nb.cells[0].source.endswith("\nx")


def test_skip_cpu_single_keeps_a_comparison() -> None:
    # Without a GPU or a cluster only cpu-threads would be left: nothing to compare, so the cell stays.
    nb = new_notebook(cells=[new_code_cell("%%gpurun --compare all\nx")])
    assert runner.skip_cpu_single(nb, gpu=False) == 0
    assert nb.cells[0].source == "%%gpurun --compare all\nx"


def test_kernel_env_puts_the_repository_first(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTHONPATH", "/somewhere/else")
    paths = runner.kernel_env()["PYTHONPATH"].split(":")
    assert paths == [str(ROOT), "/somewhere/else"]


def _contains(text: str, wanted: str | tuple[str, ...]) -> bool:
    return any(option in text for option in ((wanted,) if isinstance(wanted, str) else wanted))


@pytest.mark.slow
@pytest.mark.parametrize("path", EXAMPLES, ids=[path.stem for path in EXAMPLES])
def test_example_runs_on_the_cpu(path: Path) -> None:
    pytest.importorskip("nbclient")
    pytest.importorskip("ipykernel")
    nb = _read(path)
    runner.execute(nb, timeout=300)  # raises CellExecutionError, with the cell's traceback, on any error

    text = runner.outputs_text(nb)
    missing = [wanted for wanted in EXPECTED[path.stem] if not _contains(text, wanted)]
    assert not missing, f"{path.name}: outputs lack {missing}"

    summaries, compares = runner.gpurun_outputs(nb)
    gpurun_cells = [_first_line(cell) for cell in nb.cells if _first_line(cell).startswith("%%gpurun")]
    reported = {item["cell"] for item in summaries + compares}
    assert set(gpurun_cells) <= reported, "every %%gpurun cell shows its summary"
    compare_cells = [line for line in gpurun_cells if "--compare" in line]
    assert len(compares) == len(compare_cells)
    for compare in compares:
        rows = compare["text"].splitlines()[1:]
        agreements = [row for row in rows if not row.startswith(" ")]
        assert "reference" in agreements[0]
        assert len(agreements) >= 2 and all(row.rstrip().endswith("agrees") for row in agreements[1:]), compare["text"]
        assert "differs" not in compare["text"] and "failed" not in compare["text"]

    if path.stem == "linear-algebra":
        ratio = float(re.search(r"largest singular value .* = ([0-9.]+)", text)[1])  # type: ignore[index]
        assert ratio == pytest.approx(1.0, rel=1e-3)


def test_full_size_skips_cpu_single_unless_kept() -> None:
    assert runner.parse_args(["--full"]).skip_cpu_single is True
    assert runner.parse_args(["--full", "--keep-cpu-single"]).skip_cpu_single is False
    assert runner.parse_args([]).skip_cpu_single is False
    assert runner.parse_args(["--skip-cpu-single"]).skip_cpu_single is True
