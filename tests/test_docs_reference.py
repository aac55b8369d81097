"""The documentation's reference pages say what the code does: every magic with the help that ``%name?`` prints and
every option its parser takes, every setting with its default, every ``/metrics`` series with the labels its series
carry, every REST route with who may call it; and the GPU runs the site shows say where and when they ran.

The pages are written by ``docs/_ext/reference_pages`` when the site builds; these tests check that writer against the
code, so a new option, setting, series or route that the pages would miss fails here.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import io
import json
import re
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from IPython.core.interactiveshell import InteractiveShell

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "gpu_magics"
sys.path.insert(0, str(ROOT / "docs" / "_ext"))

from notebook_pages import RUN_KEY, STORED, as_run, changed_cells, run_note, stage  # noqa: E402
from reference_pages import helptext, magics, metrics, pages, routes, settings  # noqa: E402


@pytest.fixture(scope="module")
def written() -> dict[str, str]:
    return pages()


def sources() -> Iterator[tuple[Path, ast.Module]]:
    for path in sorted(PACKAGE.rglob("*.py")):
        yield path, ast.parse(path.read_text(encoding="utf-8"))


# -- magics ------------------------------------------------------------------------------------------------------


def token(option: str) -> re.Pattern[str]:
    """``option`` as a word of its own (``-d`` is not the start of ``--device``)."""
    return re.compile(rf"(?<![\w-]){re.escape(option)}(?![\w-])")


def test_every_magic_the_extension_registers_has_a_section_with_its_help(written: dict[str, str]) -> None:
    found = list(magics.magics())
    assert {magic.name for magic in found} == {"gpucluster", "gpurun", "gpugraph", "gpumonitor", "gpumemory"}
    for magic in found:
        assert f"(magic-{magic.name})=" in written["magics"]
        assert magic.help.strip() and helptext.markdown(magic.help) in written["magics"]


def test_the_help_is_text_without_literal_markup(written: dict[str, str]) -> None:
    """The help reads as text: no block to scroll sideways, no ``double backticks`` or ``Usage::`` shown; its usage
    and option lines are list items, each command as code."""
    for magic in magics.magics():
        shown = helptext.markdown(magic.help)
        assert "```" not in shown and "``" not in shown.replace("``` ", "") and "::" not in shown, magic.name
        assert "Usage:\n\n- `%" in shown, magic.name
        assert not any(line.startswith("    ") for line in shown.splitlines()), magic.name
    cluster = helptext.markdown(next(m for m in magics.magics() if m.name == "gpucluster").help)
    assert "- `--gpus all|0,2,3`: GPUs to use, one worker each (default: all visible)" in cluster
    assert "- `%gpucluster --cpu-workers N`: N CPU worker processes instead (machines without a GPU)" in cluster


def test_every_option_says_what_it_does_and_its_default_from_its_parser(written: dict[str, str]) -> None:
    from gpu_magics.cluster import options as cluster_options

    page = written["magics"]
    assert "see the help" not in page
    rows = 0
    for magic in magics.magics():
        section = page.split(f"(magic-{magic.name})=", 1)[1].split("\n(magic-", 1)[0]
        for action in magics.options(magic.parser) if magic.parser is not None else []:
            flags = ", ".join(f"`{flag}`" for flag in action.option_strings)
            row = next(line for line in section.splitlines() if line.startswith(f"| {flags} |"))
            cells = [cell.strip() for cell in row.strip("|").split(" | ")]
            assert cells[1] == " ".join(magics.does(action).split()).replace("|", "\\|") and cells[1], row
            assert cells[3] and cells[3] == magics.default(action).replace("|", "\\|"), row
            rows += 1
    assert rows > 45
    timeout = next(a for a in magics.options(cluster_options._PARSER) if "--timeout" in a.option_strings)
    said = f"{cluster_options.DEFAULT_ATTACH_TIMEOUT:g} s attaching, {cluster_options.DEFAULT_START_TIMEOUT:g} s"
    assert magics.default(timeout).startswith(said)  # the constant the code uses, as it is now


def test_an_option_without_words_fails_the_parser_and_the_build() -> None:
    from gpu_magics.text.argparsing import MagicArgumentParser

    parser = MagicArgumentParser("%gpumonitor")
    parser.add_argument("--interval")
    parser.add_argument("--stop", action="store_true")
    parser.add_argument("--odd")
    with pytest.raises(KeyError, match="--odd"):
        parser.described({})
    bare = argparse.ArgumentParser().add_argument("--bare")
    with pytest.raises(KeyError, match="option_help"):
        magics.default(bare)


def test_every_option_of_every_magic_is_in_the_reference(written: dict[str, str]) -> None:
    page = written["magics"]
    checked = 0
    for magic in magics.magics():
        if magic.parser is None:
            continue
        section = page.split(f"(magic-{magic.name})=", 1)[1].split("\n(magic-", 1)[0]
        for action in magics.options(magic.parser):
            for option in action.option_strings:
                assert f"`{option}`" in section, f"{magic.name}: {option}"
                checked += 1
    assert checked > 50


def test_every_option_a_parser_takes_is_in_the_help_its_magic_prints() -> None:
    missing = [
        f"{magic.name}: {option}"
        for magic in magics.magics()
        if magic.parser is not None
        for action in magics.options(magic.parser)
        for option in action.option_strings
        if not token(option).search(magic.help)
    ]
    assert missing == []


def test_every_parser_the_package_makes_is_named_in_the_reference() -> None:
    made = []
    for path, tree in sources():
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and ast.unparse(node.func) == "MagicArgumentParser":
                made.append(path.relative_to(ROOT).with_suffix("").as_posix().replace("/", "."))
    named = [spec.partition(":")[0] for spec in magics.PARSERS.values()]
    assert sorted(made) == sorted(named)
    for name in magics.PARSERS:
        parser = magics.parser(name)
        assert parser is not None and parser.prog.lstrip("%") == name


def test_every_value_an_option_takes_is_said_in_words() -> None:
    for magic in magics.magics():
        for action in magics.options(magic.parser) if magic.parser is not None else []:
            said = magics.takes(action)  # raises for a type it has no words for
            assert said and "_" not in said.replace("`", "").split()[0], (magic.name, action.option_strings)


@pytest.mark.parametrize("line", ["%gpucluster?", "%%gpurun?", "%gpurun?", "%gpumonitor?", "%gpugraph?"])
def test_the_help_in_the_reference_is_what_the_question_mark_prints(ip: InteractiveShell, line: str) -> None:
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        ip.run_cell(line)
    text = printed.getvalue()
    assert text.startswith("Docstring:\n"), text[:200]
    shown = text.removeprefix("Docstring:\n").rsplit("\nFile:", 1)[0]
    (magic,) = [found for found in magics.magics() if found.name == line.strip("%?")]
    assert shown == magic.help


def test_a_parser_without_words_for_its_type_fails_the_build() -> None:
    parser = argparse.ArgumentParser()
    action = parser.add_argument("--odd", type=lambda text: text)
    action.type.__name__ = "odd_type"
    with pytest.raises(KeyError, match="odd_type"):
        magics.takes(action)


# -- settings ----------------------------------------------------------------------------------------------------


def configurable_classes() -> set[str]:
    """The classes of the package that declare a ``.tag(config=True)`` trait."""
    found = set()
    for _, tree in sources():
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef) and "tag(config=True)" in ast.unparse(node):
                found.add(node.name)
    return found


def test_every_configurable_setting_is_in_the_reference_with_its_default_and_help(written: dict[str, str]) -> None:
    owners = [settings.resolve(spec) for spec in (*settings.MAGICS_SETTINGS, settings.SERVER_SETTINGS)]
    covered = {cls.__name__ for owner in owners for cls in owner.__mro__}
    assert configurable_classes() <= covered
    page = written["settings"]
    for owner in owners:
        section = page.split(f"(settings-{owner.__name__.lower()})=", 1)[1].split("\n(settings-", 1)[0]
        traits = owner.class_traits(config=True)
        assert traits
        for name, trait in traits.items():
            row = next(line for line in section.splitlines() if line.startswith(f"| `{name}` |"))
            assert f"`{trait.default_value_repr()}`" in row
            assert " ".join(trait.help.split()).replace("|", "\\|") in row


def dask_keys_read() -> set[str]:
    """Every ``gpu-magics.*`` dask config key the package's code names."""
    found = set()
    for _, tree in sources():
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                found.update(re.findall(r"^gpu-magics\.[a-z0-9-]+$", node.value))
    return found


def test_every_dask_config_key_the_package_reads_is_in_the_reference_with_its_default(
    written: dict[str, str],
) -> None:
    assert {key.key for key in settings.DASK_KEYS} == dask_keys_read()
    for key in settings.DASK_KEYS:
        row = next(line for line in written["settings"].splitlines() if line.startswith(f"| `{key.key}` |"))
        assert f"`{settings.dask_default(key)}`" in row


def test_a_dask_key_s_default_is_what_the_code_uses_where_the_config_leaves_it() -> None:
    import dask

    defaults = {key.key: settings.dask_default(key) for key in settings.DASK_KEYS}
    assert defaults["gpu-magics.fold-reductions"] is True
    assert isinstance(defaults["gpu-magics.runs-per-slot"], int)
    with dask.config.set({"gpu-magics.runs-per-slot": 7}):  # the user's setting does not change the default shown
        assert settings.dask_default(settings.DASK_KEYS[0]) == defaults["gpu-magics.runs-per-slot"]
        assert dask.config.get("gpu-magics.runs-per-slot") == 7


def test_every_environment_variable_the_package_reads_is_in_the_reference(written: dict[str, str]) -> None:
    named = set()
    for _, tree in sources():
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                named.update(re.findall(r"^GPU_MAGICS_[A-Z0-9_]+$", node.value))
    assert {name for name, _, _ in settings.ENVIRONMENT} == named
    for name, _, _ in settings.ENVIRONMENT:
        assert f"| `{name}` |" in written["settings"]


# -- /metrics ----------------------------------------------------------------------------------------------------


def produced_labels() -> dict[str, list[set[str]]]:
    """Family -> the label names of each series, from frames built as a refresh builds them: GPUs whole and MIG, a
    remote GPU, a kernel's memory by part, idle holds, clusters, leftovers, with the notebook label and in a pod."""
    from gpu_magics.cluster.records import record as records
    from gpu_magics.server.leftovers.registry import Leftover
    from gpu_magics.server.metrics import collector
    from gpu_magics.server.metrics.frame import build
    from gpu_magics.server.metrics.idle import IdleHold
    from gpu_magics.server.metrics.labels import Place
    from gpu_magics.server.reclaim.reclaimer import IdleReclaim
    from tests.server.test_metrics import GIB, IDLE, MIG, PARENT, holding, inputs, reading, snapshot

    cluster = records.ClusterRecord(name="train", scheduler_address="tcp://127.0.0.1:1", dashboard_url=None,
                                    kind="gpu", workers=2, gpus=("0", "1"), kernel_id="k1", idle_timeout=1800.0,
                                    idle_since=900.0)  # fmt: skip
    remote = ("gpu-node-2", {"uuid": "GPU-7e570000-0000-0000-0000-0000000000aa", "index": 0, "name": "H100",
                             "gpu_util": 50, "memory_used": GIB, "memory_total": 80 * GIB})  # fmt: skip
    leftover = Leftover(pid=4242, started=1.0, name="python", kernel_id="k0", gpu=0, gpu_uuid=IDLE, gpu_label="GPU 0",
                        used_memory=GIB)  # fmt: skip
    shot = snapshot(reading(0, IDLE), reading(1, MIG, mig_parent=PARENT, gpu_util=None, power=None))
    data = inputs(shot, holding("k1", IDLE, GIB, sm_util=40.0, memory_cap=GIB, memory_cap_by="server"),
                  holding("k1", MIG, GIB, part="workers", memory_cap=GIB, memory_cap_by="notebook"),
                  holding("k2", IDLE, GIB, part="children"), records=(cluster,),
                  remote=(remote,), paths={"k1": "work/train.ipynb"}, leftovers=(leftover,),
                  managed=frozenset({"k1", "k2"}))  # fmt: skip
    found: dict[str, list[set[str]]] = {}
    for place in (Place("gpu-node-1"), Place("gpu-node-1", (("pod", "jupyter-ada"), ("namespace", "hub")))):
        for notebook_label in (False, True):
            frame = build(data, place, IdleHold(), idle_utilization=5.0, notebook_label=notebook_label)
            for metric in collector.metrics(frame, {"k1", "k2"}, 1000.0):
                found.setdefault(metric.name, []).extend(set(sample.labels) for sample in metric.samples)
        for metric in IdleReclaim(None, 60.0).families(place):
            found.setdefault(f"{metric.name}_total", []).extend(set(sample.labels) for sample in metric.samples)
    return found


def test_every_series_carries_the_labels_the_reference_lists() -> None:
    from gpu_magics.server.metrics.series import SERIES

    produced = produced_labels()
    declared = {series.name: series for series in SERIES}
    assert set(produced) == set(declared) == set(metrics.helps())
    for name, label_sets in produced.items():
        series = declared[name]
        for labels in label_sets:
            assert set(series.labels) <= labels <= set(series.labels) | set(series.sometimes), (name, labels)
    seen = {label for sets in produced.values() for labels in sets for label in labels}
    listed = {label for series in SERIES for label in (*series.labels, *series.sometimes)}
    assert seen == listed  # every label the reference lists is one some series has


def test_every_series_and_label_is_on_the_metrics_page(written: dict[str, str]) -> None:
    from gpu_magics.server.metrics.series import LABELS, SERIES

    page = written["metrics"]
    for series in SERIES:
        section = page.split(f"(metric-{series.name})=", 1)[1].split("\n(metric-", 1)[0]
        assert " ".join(metrics.helps()[series.name].split()) in section
        assert all(f"`{label}`" in section for label in (*series.labels, *series.sometimes))
    assert {label for series in SERIES for label in (*series.labels, *series.sometimes)} == set(LABELS)
    for label in LABELS:
        assert f"| `{label}` |" in page


# -- routes ------------------------------------------------------------------------------------------------------


def test_every_route_is_in_the_reference_and_every_route_needs_an_authorized_user(written: dict[str, str]) -> None:
    from gpu_magics.server.routes import NAMESPACE, ROUTES

    found = routes.routes()
    assert {route.path for route in found} == {f"/{NAMESPACE}/{path}" for path, _ in ROUTES}
    for route in found:
        assert route.authenticated and route.action in ("read", "write") and route.resource == "gpu_magics", route
        assert f"| `{route.method}` | `{route.path}` |" in written["rest-api"]
    posts = {route.path for route in found if route.method == "POST"}
    assert posts == {"/gpu-magics/api/clusters/prune", "/gpu-magics/api/leftovers/end"}
    assert all(route.action == "write" for route in found if route.method == "POST")


# -- notebooks ---------------------------------------------------------------------------------------------------


def test_every_stored_gpu_run_says_its_hardware_date_and_commit() -> None:
    stored = sorted(STORED.glob("*.ipynb"))
    assert stored
    for path in stored:
        run = json.loads(path.read_text(encoding="utf-8"))["metadata"][RUN_KEY]
        assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", run["date"]) and run["hardware"] and run["commit"], path.name
        note = run_note(path.stem, run)
        assert run["hardware"] in note and run["date"] in note and run["commit"] in note


def test_a_stored_run_without_its_hardware_fails_the_build() -> None:
    from sphinx.errors import ExtensionError

    with pytest.raises(ExtensionError, match="lacks hardware"):
        run_note("quickstart", {"date": "2026-11-21", "commit": "1f5e4e6"})


def test_the_pages_of_the_notebooks_are_staged_with_the_note_under_the_title(tmp_path: Path) -> None:
    written_pages = stage(tmp_path)
    names = {path.relative_to(tmp_path).as_posix() for path in written_pages}
    assert {"notebooks/quickstart.ipynb", "notebooks/spmd-training.ipynb", "notebooks/gpu/quickstart.ipynb"} <= names
    page = json.loads((tmp_path / "notebooks" / "gpu" / "speed-cubing.ipynb").read_text(encoding="utf-8"))
    assert page["cells"][0]["source"][0].startswith("#") or "".join(page["cells"][0]["source"]).startswith("#")
    assert page["cells"][1]["id"] == "stored-run-note" and "ran on **" in page["cells"][1]["source"]
    assert all("id" in cell for cell in page["cells"])
    index = (tmp_path / "notebooks" / "gpu" / "index.md").read_text(encoding="utf-8")
    assert all(path.stem in index for path in STORED.glob("*.ipynb"))


def test_a_run_of_the_examples_records_where_and_when_it_ran() -> None:
    sys.path.insert(0, str(ROOT / "scripts"))
    import run_examples

    record = run_examples.run_record(["--full", "--only", "quickstart"])
    assert re.fullmatch(r"(no GPU|(\d+x [^,]+, )+)?.*\d+ CPU threads", record["hardware"])
    assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", record["date"]) and record["commit"]
    assert record["command"] == "python scripts/run_examples.py --full --only quickstart"
    assert "ran on **" in run_note("quickstart", record)


def test_a_notebook_past_its_time_limit_fails_the_build() -> None:
    from notebook_pages import CPU_NOTEBOOKS, over_time

    assert over_time({"quickstart": 5.0, "spmd-training": None}) == []
    (line,) = over_time({"quickstart": CPU_NOTEBOOKS["quickstart"] + 1.0, "first-steps": 5.0})
    assert line.startswith("notebooks/quickstart.ipynb ran ") and "over its limit" in line


# The stored runs made before the examples last changed: the site shows them until they are run again on GPUs
# (python scripts/run_examples.py --full), and each then leaves this list (its test passing here fails: strict).
STALE_RUNS: set[str] = {"spmd-training"}  # its skip lines name the spmd extra since


@pytest.mark.parametrize(
    "name",
    [
        pytest.param(path.stem, marks=pytest.mark.xfail(strict=True, reason="run before the example changed"))
        if path.stem in STALE_RUNS
        else path.stem
        for path in sorted(STORED.glob("*.ipynb"))
    ],
)
def test_a_stored_run_shows_the_example_as_it_is(name: str) -> None:
    """The page of a stored run shows the example's cells as they are now, with that run's outputs."""
    assert changed_cells(name) == []
    run = json.loads((STORED / f"{name}.ipynb").read_text(encoding="utf-8"))["metadata"][RUN_KEY]
    assert "has changed since" not in run_note(name, run, changed_cells(name))


def test_the_note_of_a_stored_run_says_when_the_example_changed_since() -> None:
    run = {"hardware": "4x NVIDIA H200, 64 CPU threads", "date": "2026-11-21", "commit": "1f5e4e6"}
    assert "has changed since in 2 cells" in run_note("quickstart", run, [0, 3])
    assert "changed" not in run_note("quickstart", run, [])
    assert as_run("N = 4_000  # on GPUs: N = 100_000 (80 GB)\n%%gpurun --compare all -o c") == as_run(
        "N = 100_000  # on GPUs: N = 100_000 (80 GB)  [set by run_examples.py: full size; small: 4_000]\n"
        "%%gpurun --compare cpu-threads,gpu -o c"
    )
    assert as_run("from gpu_magics import devices") != as_run("from gpu_magics.gpus import inventory")


def test_the_python_api_page_documents_everything_the_package_exports() -> None:
    import gpu_magics
    from gpu_magics import spmd

    page = (ROOT / "docs" / "reference" / "python-api.md").read_text(encoding="utf-8")
    members = re.search(r"\.\. automodule:: gpu_magics\n\s+:members: (.*)", page)
    assert members is not None
    documented = {name.strip() for name in members.group(1).split(",")}
    documented |= {f"spmd.{name}" for name in re.findall(r"autofunction:: gpu_magics\.spmd\.(\w+)", page)}
    exported = {name for name in gpu_magics.__all__ if name != "__version__"} | {f"spmd.{n}" for n in spmd.__all__}
    assert exported <= documented


def test_no_reference_page_speaks_of_rounds(written: dict[str, str]) -> None:
    from tests.test_docs_pages import HISTORY_WORDS

    hand_written = {path.stem: path.read_text(encoding="utf-8") for path in (ROOT / "docs" / "reference").glob("*.md")}
    found = {name: HISTORY_WORDS.findall(text) for name, text in {**written, **hand_written}.items()}
    assert {name: words for name, words in found.items() if words} == {}
