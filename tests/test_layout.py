"""The package's layout rules, checked on its source: who may import what, and no import circles (lazy imports count).

Read statically (``ast``), so the rules hold for code paths a test run never takes.
"""

from __future__ import annotations

import ast
import functools
import re
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "gpu_magics"
STDLIB = set(sys.stdlib_module_names) | {"__future__"}


def module_name(path: Path, package: Path = PACKAGE) -> str:
    parts = path.relative_to(package.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def package_modules(package: Path) -> dict[str, Path]:
    """Dotted name -> file, for every module of ``package`` (a folder)."""
    return {module_name(path, package): path for path in sorted(package.rglob("*.py"))}


MODULES = package_modules(PACKAGE)


def _parsed(path: Path) -> ast.Module:
    """Each file's text is parsed once for every rule."""
    return _parse(path.read_text(encoding="utf-8"))


@functools.cache
def _parse(text: str) -> ast.Module:
    return ast.parse(text)


def imports(path: Path, *, top_level_only: bool = False, modules: dict[str, Path] = MODULES) -> Iterator[str]:
    """Every module ``path`` imports (``import_module("x")`` too; ``from p import m`` names ``p.m`` when it is one
    of ``modules``); with ``top_level_only``, only those run at import time (not inside functions, not under
    ``if TYPE_CHECKING``)."""
    tree = _parsed(path)

    def walk(node: ast.AST, inside: bool) -> Iterator[str]:
        for child in ast.iter_child_nodes(node):
            nested = inside or isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef)
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                nested = True
            if top_level_only and nested:
                continue
            if isinstance(child, ast.Import):
                yield from (alias.name for alias in child.names)
            elif isinstance(child, ast.ImportFrom):
                assert child.level == 0, f"{path}: the package uses absolute imports only"
                base = child.module or ""
                yield base
                yield from (f"{base}.{alias.name}" for alias in child.names if f"{base}.{alias.name}" in modules)
            elif (
                isinstance(child, ast.Call)
                and ast.unparse(child.func).endswith("import_module")
                and child.args
                and isinstance(child.args[0], ast.Constant)
            ):
                yield str(child.args[0].value)
            yield from walk(child, nested)

    yield from walk(tree, False)


def importers_of(prefix: str) -> set[str]:
    return {
        name
        for name, path in MODULES.items()
        if any(found == prefix or found.startswith(prefix + ".") for found in imports(path))
    }


@pytest.mark.parametrize(
    ("prefix", "allowed"),
    [
        ("IPython.core.magic", "gpu_magics.magics."),
        ("pynvml", "gpu_magics.monitor.nvml"),
        ("ipywidgets", "gpu_magics.display."),
        ("tornado", "gpu_magics.server"),
        ("jupyter_server", "gpu_magics.server"),
        ("dask_jobqueue", "gpu_magics.cluster.managers.slurm"),
    ],
)
def test_only_one_place_imports(prefix: str, allowed: str) -> None:
    strays = sorted(name for name in importers_of(prefix) if not name.startswith(allowed))
    assert strays == [], f"{prefix} may be imported only in {allowed}*, not in {strays}"


ENUMERATING = ("getDeviceCount", "nvmlDeviceGetCount", "device_get_count")


def test_only_the_inventory_and_the_monitor_source_enumerate_devices() -> None:
    allowed = {"gpu_magics.gpus", "gpu_magics.monitor.nvml", "gpu_magics.monitor.fake"}
    strays = sorted(
        name
        for name, path in MODULES.items()
        if name not in allowed and any(call in path.read_text(encoding="utf-8") for call in ENUMERATING)
    )
    assert strays == []


PURE: tuple[str, ...] = ("gpu_magics.gpurun.options", "gpu_magics.cluster.options", "gpu_magics.cluster.info")
PURE += ("gpu_magics.cluster.records.record", "gpu_magics.monitor.models", "gpu_magics.text.argparsing")
PURE += ("gpu_magics.spmd.messages", "gpu_magics.text.errors")


@pytest.mark.parametrize("name", PURE)
def test_data_and_option_modules_import_no_io(name: str) -> None:
    """Records, options and models import only the standard library, IPython's UsageError and each other."""
    found = set(imports(MODULES[name], top_level_only=True))
    allowed = STDLIB | {"IPython.core.error", *PURE}
    strays = sorted(m for m in found if m.split(".")[0] not in STDLIB and m not in allowed)
    assert strays == []


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every cycle a depth-first walk meets, as ``[a, b, ..., a]``."""
    cycles: list[list[str]] = []
    state: dict[str, int] = {}  # 1 on the stack, 2 done

    def visit(node: str, stack: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                cycles.append([*stack[stack.index(nxt) :], nxt])
            elif nxt not in state:
                visit(nxt, [*stack, nxt])
        state[node] = 2

    for name in sorted(graph):
        if name not in state:
            visit(name, [name])
    return cycles


def import_graph(modules: dict[str, Path]) -> dict[str, set[str]]:
    """Module -> the modules of ``modules`` it imports anywhere: at the top, inside functions (lazy imports) and
    under ``if TYPE_CHECKING``. A lazy import is for start-up cost, not a way around the dependency rule."""
    return {
        # a module's own parent packages are imported before it anyway: not an edge
        name: {m for m in imports(path, modules=modules) if m in modules and m != name and not name.startswith(m + ".")}
        for name, path in modules.items()
    }


def test_no_import_circles() -> None:
    assert find_cycles(import_graph(MODULES)) == []


def within(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def test_the_engines_depend_one_way() -> None:
    """``gpurun`` asks the cluster engine through ``cluster.control.queries`` only (the packages on the way import
    nothing); the cluster engine needs nothing from ``gpurun`` (the dask settings both use live in
    ``arrays.dask_settings``, below both)."""
    graph = import_graph(MODULES)

    def edges(source: str, target: str) -> set[str]:
        return {m for name, found in graph.items() if within(name, source) for m in found if within(m, target)}

    assert edges("gpu_magics.cluster", "gpu_magics.gpurun") == set()
    assert edges("gpu_magics.gpurun", "gpu_magics.cluster") <= {
        "gpu_magics.cluster",
        "gpu_magics.cluster.control",
        "gpu_magics.cluster.control.queries",
    }


def test_the_circle_check_sees_a_lazy_circle(tmp_path: Path) -> None:
    """A circle closed by an import inside a function (or under ``TYPE_CHECKING``) is still a circle."""
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "sub" / "__init__.py").write_text("")
    (package / "a.py").write_text("from pkg.sub import b\n")
    (package / "sub" / "b.py").write_text("def f():\n    from pkg import a\n\n    return a\n")
    (package / "c.py").write_text("from typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n    import pkg.a\n")
    modules = package_modules(package)
    assert set(modules) == {"pkg", "pkg.sub", "pkg.a", "pkg.sub.b", "pkg.c"}
    assert find_cycles(import_graph(modules)) == [["pkg.a", "pkg.sub.b", "pkg.a"]]
    assert import_graph(modules)["pkg.c"] == {"pkg.a"}
    (package / "sub" / "b.py").write_text("def f():\n    return 1\n")
    assert find_cycles(import_graph(package_modules(package))) == []


def test_top_level_holds_only_entry_points_and_cross_cutting_modules() -> None:
    """The entry points and the GPU inventory at the top; what the user types and reads (the line parser, its
    options' words, the package's errors, the hints, how numbers are written, a line said in the notebook) in
    ``text/``."""
    top = sorted(path.name for path in PACKAGE.glob("*.py"))
    assert top == ["__init__.py", "gpus.py"]
    text = sorted(path.name for path in (PACKAGE / "text").glob("*.py"))
    assert text == ["__init__.py", "argparsing.py", "errors.py", "hints.py", "option_help.py", "said.py", "units.py"]


MAX_MODULE_LINES = 420  # a limit, not a target


def test_no_module_is_too_long() -> None:
    long = {name: n for name, path in MODULES.items() if (n := len(path.read_text().splitlines())) > MAX_MODULE_LINES}
    assert long == {}


def own_module_aliases(path: Path, modules: dict[str, Path] = MODULES) -> set[str]:
    """``module as name`` for each module of ``modules`` that ``path`` imports under a name not its own
    (``from p import m as n``, ``import p.m as n``); a function or class imported under another name is not one."""
    found: set[str] = set()
    for node in ast.walk(_parsed(path)):
        if isinstance(node, ast.ImportFrom):
            pairs = [(f"{node.module}.{alias.name}", alias.asname) for alias in node.names]
        elif isinstance(node, ast.Import):
            pairs = [(alias.name, alias.asname) for alias in node.names]
        else:
            continue
        found |= {
            f"{name} as {asname}"
            for name, asname in pairs
            if name in modules and asname not in (None, name.rsplit(".", 1)[-1])
        }
    return found


# The modules that still import one of the package's modules under another name, each with those imports: the SPMD
# wing only, until it is cleaned (an entry goes as its module is; nothing outside ``spmd/`` joins the list).
ALIASED_FOR_NOW: dict[str, set[str]] = {}  # none left


def test_own_modules_are_imported_under_their_own_names() -> None:
    """``from gpu_magics.cluster.control import lifecycle``, never ``lifecycle as cluster``: a module whose name has
    to be changed where it is imported is a module to rename, and a clash with a local name is the local's to give
    way."""
    assert all(within(name, "gpu_magics.spmd") for name in ALIASED_FOR_NOW)
    strays = {
        name: sorted(aliases - ALIASED_FOR_NOW.get(name, set()))
        for name, path in MODULES.items()
        if (aliases := own_module_aliases(path)) - ALIASED_FOR_NOW.get(name, set())
    }
    assert strays == {}


def test_the_alias_check_sees_a_module_under_another_name(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("def f():\n    return 1\n")
    (package / "b.py").write_text(
        "import pkg.a as a\nfrom pkg import a as other\nfrom pkg.a import f as g\n\n\n"
        "def h():\n    import pkg.a as again\n"
    )
    found = own_module_aliases(package / "b.py", package_modules(package))
    assert found == {"pkg.a as other", "pkg.a as again"}


MAX_FOLDER_ENTRIES = 10


def test_no_folder_holds_more_than_ten_entries() -> None:
    """Modules and sub-packages both count (the side panel's sources have their own test)."""
    folders: Counter[Path] = Counter()
    for path in MODULES.values():
        if path.name == "__init__.py":
            if path.parent != PACKAGE:
                folders[path.parent.parent] += 1  # a sub-package is an entry of its parent
        else:
            folders[path.parent] += 1
    crowded = {str(folder.relative_to(PACKAGE.parent)): n for folder, n in folders.items() if n > MAX_FOLDER_ENTRIES}
    assert crowded == {}


def importers_from_below(control: str, package: str, modules: dict[str, Path] = MODULES) -> dict[str, list[str]]:
    """The modules of ``package`` outside ``control`` that import ``control`` or a module in it (lazily or under
    ``TYPE_CHECKING`` too), each with what they import of it."""
    graph = import_graph(modules)
    found = {
        name: sorted(m for m in imported if within(m, control))
        for name, imported in graph.items()
        if within(name, package) and not within(name, control)
    }
    return {name: imported for name, imported in found.items() if imported}


def test_the_control_sits_above_the_rooms() -> None:
    """The kernel's cluster, its owner and its verbs (``cluster/control/``) use the rooms of ``cluster/`` (managers,
    reading, background, records, telemetry, workers, dashboard); no room reaches up into the control."""
    assert importers_from_below("gpu_magics.cluster.control", "gpu_magics.cluster") == {}


def test_the_control_check_sees_a_room_reaching_up(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    for folder in (package, package / "control", package / "rooms"):
        folder.mkdir(parents=True)
        (folder / "__init__.py").write_text("")
    (package / "control" / "verb.py").write_text("from pkg.rooms import low\n")
    (package / "rooms" / "low.py").write_text("X = 1\n")
    assert importers_from_below("pkg.control", "pkg", package_modules(package)) == {}
    (package / "rooms" / "up.py").write_text("def f():\n    from pkg.control import verb\n\n    return verb\n")
    found = importers_from_below("pkg.control", "pkg", package_modules(package))
    assert found == {"pkg.rooms.up": ["pkg.control", "pkg.control.verb"]}


def folder_of(name: str, modules: dict[str, Path] = MODULES) -> str:
    """The package a module sits in (a package's ``__init__`` sits in the package itself)."""
    return name if modules[name].name == "__init__.py" else name.rsplit(".", 1)[0]


def folders_importing_each_other(modules: dict[str, Path] = MODULES) -> dict[tuple[str, str], list[str]]:
    """The pairs of folders with imports both ways (a module directly in one importing a module directly in the
    other, lazy and ``TYPE_CHECKING`` imports too), each with those imports as ``importer -> imported``."""
    edges: dict[tuple[str, str], list[str]] = {}
    for name, imported in import_graph(modules).items():
        for target in sorted(imported):
            pair = (folder_of(name, modules), folder_of(target, modules))
            if pair[0] != pair[1]:
                edges.setdefault(pair, []).append(f"{name} -> {target}")
    return {(a, b): edges[a, b] + edges[b, a] for a, b in sorted(edges) if a < b and (b, a) in edges}


# The pairs of folders that still import each other, each with why (a pair goes as soon as it can; none joins).
FOLDERS_BOTH_WAYS: set[tuple[str, str]] = {
    # the package's entry points (``load_ipython_extension``) call the magics; ``magics.free_gpus`` reads the inventory
    ("gpu_magics", "gpu_magics.magics"),
    # ``managers/`` holds both what each manager builds on (``base``, ``needs``, ``attach``) and what picks one
    # (``opening``) or reads another's jobs (``adopted``)
    ("gpu_magics.cluster.managers", "gpu_magics.cluster.managers.gateway"),
    ("gpu_magics.cluster.managers", "gpu_magics.cluster.managers.local"),
    ("gpu_magics.cluster.managers", "gpu_magics.cluster.managers.slurm"),
    # the managers read the scheduler (``reading.inspection``); the running cluster's data names its manager's type
    ("gpu_magics.cluster.managers", "gpu_magics.cluster.reading"),
    # ``display``'s registration shows the objects' views; those views use its styles and drawing
    ("gpu_magics.display", "gpu_magics.display.objects"),
    # ``execute`` runs the live views of a cell; the cell's monitor shows the backend plan
    ("gpu_magics.gpurun", "gpu_magics.gpurun.live"),
    # the server's routes and entry point serve each room's handlers; those handlers share the server's base handler
    # and monitor service
    ("gpu_magics.server", "gpu_magics.server.leftovers"),
    ("gpu_magics.server", "gpu_magics.server.metrics"),
    # the metrics feed runs the reclaimer, which reads what the metrics count as held
    ("gpu_magics.server.metrics", "gpu_magics.server.reclaim"),
    # ``gpu_magics.spmd`` re-exports ``push``, ``pull`` and ``shards``, which send the messages it defines
    ("gpu_magics.spmd", "gpu_magics.spmd.kernel.data"),
    ("gpu_magics.spmd", "gpu_magics.spmd.rank"),
}


def test_no_two_folders_import_each_other() -> None:
    """A folder is a floor: it imports the folders below it (its parent's modules, or its children's) and is
    imported by those above, never both with one folder."""
    found = folders_importing_each_other()
    new = {pair: imports_ for pair, imports_ in found.items() if pair not in FOLDERS_BOTH_WAYS}
    gone = sorted(FOLDERS_BOTH_WAYS - set(found))
    assert (new, gone) == ({}, []), f"import one way: {new}; gone, drop from FOLDERS_BOTH_WAYS: {gone}"


def test_the_folder_check_sees_two_folders_importing_each_other(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    for folder in (package, package / "low", package / "high"):
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "__init__.py").write_text("")
    (package / "base.py").write_text("X = 1\n")
    (package / "low" / "room.py").write_text("from pkg import base\n")
    (package / "high" / "verb.py").write_text("from pkg.low import room\n")
    assert folders_importing_each_other(package_modules(package)) == {}
    (package / "low" / "back.py").write_text(
        "from typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n    import pkg.high.verb\n"
    )
    assert folders_importing_each_other(package_modules(package)) == {
        ("pkg.high", "pkg.low"): [
            "pkg.high.verb -> pkg.low",
            "pkg.high.verb -> pkg.low.room",
            "pkg.low.back -> pkg.high.verb",
        ]
    }


def test_only_squeue_runs_slurms_commands_and_only_the_rank_host_starts_processes() -> None:
    """SLURM's commands run in ``managers.squeue`` only (every call with a timeout); the only other processes this
    package starts itself are a rank process, from its worker's rank host (``rank_process``), the one that
    starts the CUDA driver ahead, from the kernel (``driver_start``), and the helper that parks the kernel's own
    context (``kernel_park``: a process cannot checkpoint itself)."""
    starting = {
        "gpu_magics.cluster.managers.slurm.squeue",
        "gpu_magics.spmd.worker.rank_process",
        "gpu_magics.cluster.workers.driver_start",
        "gpu_magics.cluster.workers.kernel_park",
    }
    assert importers_of("subprocess") == starting


def test_the_side_panels_sources_hold_at_most_ten_entries_a_folder() -> None:
    """Each folder of ``labextension/src`` holds at most ten entries (sub-folders and ``.ts`` files)."""
    source = PACKAGE.parent / "labextension" / "src"
    crowded = {}
    for folder in [source, *(path for path in source.rglob("*") if path.is_dir())]:
        entries = [path for path in folder.iterdir() if path.is_dir() or path.suffix == ".ts"]
        if len(entries) > 10:
            crowded[str(folder.relative_to(source.parent))] = len(entries)
    assert crowded == {}, f"folders of the side panel's sources with more than ten entries: {crowded}"


def test_the_cluster_engine_never_imports_the_displays() -> None:
    """Units (bytes, durations, the one-line error) live below both, in ``gpu_magics.text.units``."""
    graph = import_graph(MODULES)
    reaching = {name: sorted(m for m in found if within(m, "gpu_magics.display")) for name, found in graph.items()}
    assert {name: found for name, found in reaching.items() if within(name, "gpu_magics.cluster") and found} == {}


def test_the_spmd_rooms_keep_to_their_process() -> None:
    """The rank process imports nothing of dask, distributed, IPython or the kernel's side (except ``shards``,
    which fetches a rank's chunks from its worker with distributed's own RPC, imported only when a cell calls it),
    and of the rest of the package only the messages the three rooms share and the allocators' limits that keep a
    rank within its share of the notebook's memory cap; the worker's side nothing of the kernel's."""
    graph = import_graph(MODULES)
    shared = {"gpu_magics.spmd.messages", "gpu_magics.arrays.caps", "gpu_magics.arrays.caps.allocators"}
    for name, found in graph.items():
        if within(name, "gpu_magics.spmd.rank"):
            outside = {m for m in found if within(m, "gpu_magics") and not within(m, "gpu_magics.spmd.rank")}
            assert outside <= shared, name
            heavy = {m for m in imports(MODULES[name]) if m.split(".")[0] in ("dask", "distributed", "IPython")}
            if name == "gpu_magics.spmd.rank.shards":
                heavy = {m for m in heavy if m.split(".")[0] != "distributed"}
                tree = ast.parse((PACKAGE / "spmd" / "rank" / "shards.py").read_text())
                top = [node for node in tree.body if isinstance(node, (ast.Import, ast.ImportFrom))]
                assert not [node for node in top if "distributed" in ast.unparse(node)], "shards: import it lazily"
            assert heavy == set(), name
        if within(name, "gpu_magics.spmd.worker"):
            assert not {m for m in found if within(m, "gpu_magics.spmd.kernel")}, name


ARCHITECTURE = PACKAGE.parent / "docs" / "explanation" / "architecture.md"


def test_the_map_of_the_code_names_every_package_and_top_level_module() -> None:
    text = ARCHITECTURE.read_text(encoding="utf-8")
    table = text.split("## The map", 1)[1].split("\n\n", 2)[1]
    named = set(re.findall(r"`([a-z_/]+(?:\.py)?)`", table))
    packages = {
        str(path.parent.relative_to(PACKAGE)) + "/"
        for path in MODULES.values()
        if path.name == "__init__.py"
        and path.parent != PACKAGE
        and path.parent.parent in (PACKAGE, PACKAGE / "cluster")
    }
    top = {path.name for path in PACKAGE.glob("*.py") if path.name != "__init__.py"}
    missing = sorted(entry for entry in packages | top if entry not in named)
    assert missing == []


CLUSTER_PACKAGES = sorted(n for n, p in MODULES.items() if p.name == "__init__.py" and within(n, "gpu_magics.cluster"))


@pytest.mark.parametrize("name", CLUSTER_PACKAGES)
def test_each_cluster_package_says_where_its_code_runs_and_imports_nothing(name: str) -> None:
    """The server imports ``cluster.records.record`` without IPython or distributed: the packages above it import
    nothing, and each one's docstring says in which process its code runs."""
    path = MODULES[name]
    docstring = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
    assert "kernel" in docstring or "worker" in docstring
    assert set(imports(path)) == set()


def test_the_rules_see_a_violation(tmp_path: Path) -> None:
    """The import reader itself: a stray import and a lazy one are both found."""
    sample = PACKAGE / "display" / "__init__.py"
    assert "gpu_magics.display.objects.array_view" in set(imports(sample))
    fake = tmp_path / "fake.py"
    fake.write_text("def f():\n    import pynvml\n\nimport importlib\nimportlib.import_module('tornado')\n")
    assert {"pynvml", "tornado"} <= set(imports(fake))
    assert "pynvml" not in set(imports(fake, top_level_only=True))
    assert find_cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == [["a", "b", "c", "a"]]
    assert find_cycles({"a": {"b"}, "b": set()}) == []


BROAD = {"Exception", "BaseException"}
CATCH_BUDGET = 2.5  # broad catches per 1,000 lines of the package (distributed has 1.1 to 4.2): those left are
# listeners, threads' loops, shutdown steps, NVML polls, user code and one-line errors; never raise it


def broad_catches(path: Path) -> list[int]:
    """The lines of ``path`` that catch anything: a bare ``except:``, ``except Exception`` or ``BaseException``
    (in a tuple too), ``contextlib.suppress(Exception)``."""
    found = []
    for node in ast.walk(_parsed(path)):
        if isinstance(node, ast.ExceptHandler):
            types = node.type.elts if isinstance(node.type, ast.Tuple) else [node.type]
            if node.type is None or any(isinstance(t, ast.Name) and t.id in BROAD for t in types):
                found.append(node.lineno)
        elif (
            isinstance(node, ast.Call)
            and ast.unparse(node.func).split(".")[-1] == "suppress"
            and any(isinstance(a, ast.Name) and a.id in BROAD for a in node.args)
        ):
            found.append(node.lineno)
    return sorted(found)


def test_broad_catches_stay_within_the_budget() -> None:
    """A catch names what it expects; one that takes anything is rare (what it lets go is logged: ``units.dropped``)."""
    lines = sum(len(path.read_text(encoding="utf-8").splitlines()) for path in MODULES.values())
    count = sum(len(broad_catches(path)) for path in MODULES.values())
    assert count * 1000 / lines <= CATCH_BUDGET, f"{count} broad catches in {lines} lines"


def test_each_broad_catch_says_why_anything_goes() -> None:
    """A comment on the catch's line or the line above it."""
    silent = []
    for name, path in MODULES.items():
        text = path.read_text(encoding="utf-8").splitlines()
        for line in broad_catches(path):
            if "  # " not in text[line - 1] and not text[line - 2].lstrip().startswith("# "):
                silent.append(f"{name}:{line}")
    assert silent == []


def test_the_catch_counter_sees_every_form(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text(
        "import contextlib\ntry:\n    pass\nexcept:\n    pass\ntry:\n    pass\nexcept (OSError, Exception):\n    pass\n"
        "with contextlib.suppress(BaseException):\n    pass\ntry:\n    pass\nexcept OSError:\n    pass\n"
    )
    assert broad_catches(sample) == [4, 8, 10]


def test_views_read_the_managers_facts_never_the_clusters_kind() -> None:
    """Whether a cluster closes or detaches, can be restarted or scaled, where its workers come from: its manager
    says so (``ClusterFacts``), and the card and the side panel read that, never how the cluster was made."""
    card = (PACKAGE / "display" / "cluster_view.py").read_text()
    assert ".kind" not in card
    for name in ("model/clusters.ts", "views/sections/clusters.ts"):
        panel = (PACKAGE.parent / "labextension" / "src" / name).read_text()
        assert ".kind" not in panel, name


KIND_SCOPE = ("gpu_magics.cluster", "gpu_magics.gpurun", "gpu_magics.spmd.kernel", "gpu_magics.magics")
NOT_A_CLUSTER = {"dtype", "world", "source_from_env()"}  # a NumPy dtype's kind, the SPMD world's own, the GPU source's

# The reads of a cluster's (or its options') ``kind`` outside ``managers/`` that stay, each with why; a branch on it
# never does: what the workers are, whether the cluster was started here and what it may do are its manager's facts.
KIND_READS: dict[tuple[str, str], str] = {
    # the kind carried as data, never branched on: into the running cluster, its status and its record (the record
    # format's ``kind``: the ``/metrics`` label, and the fallback for records older kernels wrote)
    ("gpu_magics.cluster.control.steps", "options.kind"): "the running cluster's kind, as the line asked",
    ("gpu_magics.cluster.reading.cluster_state", "current.kind"): "the status's kind",
    ("gpu_magics.cluster.control.record_writer", "current.kind"): "the record's kind",
    # the line's own default name: ``%gpucluster --cpu-workers 2`` makes a cluster called "cpu"
    ("gpu_magics.cluster.options", "self.kind"): "the line's default cluster name",
    # a ``record.kind`` read in ``records/`` would join here only as the named fallback for older kernels' records
}


def kind_reads(path: Path) -> list[tuple[int, str]]:
    """Each ``x.kind`` that ``path`` reads, with its line, but a dtype's, the SPMD world's and the GPU source's."""
    return sorted(
        (node.lineno, ast.unparse(node))
        for node in ast.walk(_parsed(path))
        if isinstance(node, ast.Attribute)
        and node.attr == "kind"
        and isinstance(node.ctx, ast.Load)
        and ast.unparse(node.value).rsplit(".", 1)[-1] not in NOT_A_CLUSTER
    )


def test_no_branch_on_the_clusters_kind_outside_the_managers() -> None:
    """Only ``cluster/managers/`` looks at how the cluster was asked for; the control, the engines and the magics read
    the manager's facts (``ClusterFacts``)."""
    found: dict[tuple[str, str], list[int]] = {}
    for name, path in MODULES.items():
        if any(within(name, scope) for scope in KIND_SCOPE) and not within(name, "gpu_magics.cluster.managers"):
            for line, expression in kind_reads(path):
                found.setdefault((name, expression), []).append(line)
    strays = {
        f"{name}: {expression}": lines
        for (name, expression), lines in found.items()
        if (name, expression) not in KIND_READS
    }
    gone = sorted(pair for pair in KIND_READS if pair not in found)
    assert (strays, gone) == ({}, []), f"read the manager's facts: {strays}; gone, drop from KIND_READS: {gone}"


def test_the_kind_check_sees_a_branch_on_the_kind(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text(
        "def f(current, world, array, options):\n"
        "    options.kind = 'gpu'\n"
        "    if current.kind == 'cpu' or world.kind == 'mixed' or array.dtype.kind == 'f':\n"
        "        return {'gpu': 1}[self.options.kind]\n"
    )
    assert kind_reads(sample) == [(3, "current.kind"), (4, "self.options.kind")]
