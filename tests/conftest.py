"""Shared fixtures (a real IPython shell with the extension loaded), the quick selection and the parallel groups.

- Marker ``slow``: the test starts processes or servers (a real kernel, a Dask cluster's processes, a JupyterLab or
  jupyter-server subprocess, Chromium). ``pytest --quick`` (``bash scripts/test.sh --quick``) leaves out every test
  marked ``slow``, ``browser`` or ``gpu``; in that run a test that starts a kernel, a cluster's processes, a Jupyter
  server or a browser fails, saying it lacks the ``slow`` marker, so the quick loop stays quick.
- Under pytest-xdist with ``--dist loadgroup`` (as ``scripts/test.sh`` runs the suite) tests are spread over workers
  one by one, except: the browser tests run one after another on one worker (group ``browser``: each starts its own
  JupyterLab and Chromium, and two at once on a small machine would race their timeouts), and the tests that share a
  module-scoped fixture run on one worker (group: their module), so that fixture starts once. A test may name its
  own group with ``@pytest.mark.xdist_group("name")``.
"""

from __future__ import annotations

import contextlib
import copy
import multiprocessing.process
import os
import shlex
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest
from IPython.core.interactiveshell import InteractiveShell
from IPython.testing.globalipapp import start_ipython

NOT_QUICK = ("slow", "browser", "gpu")
# what a quick test must not start: programs, and `python -m` modules (prefixes)
HEAVY_PROGRAMS = frozenset({"node", "chromium", "chrome", "jupyter", "jupyter-lab", "jupyter-server", "dask"})
HEAVY_MODULES = ("ipykernel", "jupyterlab", "jupyter_server", "jupyter", "notebook", "distributed", "dask")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--quick",
        action="store_true",
        help="only the tests not marked slow, browser or gpu (no real kernel, cluster processes, server or browser)",
    )


def pytest_itemcollected(item: pytest.Item) -> None:
    """The xdist group of a test (see the module docstring); set at collection, before xdist reads it."""
    if item.get_closest_marker("xdist_group") is not None:
        return
    if item.get_closest_marker("browser") is not None:
        item.add_marker(pytest.mark.xdist_group("browser"))
    elif _uses_module_fixture(item):
        item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::")[0]))


def _uses_module_fixture(item: pytest.Item) -> bool:
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return False
    return any(
        definition.scope in ("module", "package") and definition.baseid  # a fixture of this suite, not of a plugin
        for definitions in info.name2fixturedefs.values()
        for definition in definitions
    )


def pytest_collection_finish(session: pytest.Session) -> None:
    """Under ``--dist loadgroup`` each grouped test's id must carry its group (pytest-xdist adds it): where a
    pytest and pytest-xdist pair does not, the groups would split silently, and a module's tests that share a
    cluster would run on two workers."""
    if not getattr(session.config.option, "loadgroup", False):  # set on xdist's workers only
        return
    for item in session.items:
        if item.get_closest_marker("xdist_group") is not None and "@" not in item.nodeid:
            raise pytest.UsageError(
                f"pytest {pytest.__version__} with this pytest-xdist does not apply --dist loadgroup's groups "
                f"({item.nodeid} has none): install the versions pyproject.toml's test extra names"
            )


@pytest.hookimpl(trylast=True)  # after tests/gpu/conftest.py has marked its tests `gpu`
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not config.getoption("quick"):
        return
    left_out = [item for item in items if any(item.get_closest_marker(name) for name in NOT_QUICK)]
    if left_out:
        config.hook.pytest_deselected(items=left_out)
        items[:] = [item for item in items if not any(item.get_closest_marker(name) for name in NOT_QUICK)]


# -- the quick run's guard: a test that starts something heavy is not quick ---------------------------------------

_offences: list[str] = []


def _heavy(args: Any) -> str | None:
    """What ``args`` (a Popen command) starts, where it is a kernel, a server, a cluster process or a browser."""
    argv = shlex.split(args) if isinstance(args, str) else [os.fspath(a) for a in args]
    if not argv:
        return None
    program = os.path.basename(argv[0])
    if program in HEAVY_PROGRAMS or program.startswith(("dask-", "jupyter-")):
        return program
    if "-m" in argv[:-1]:
        module = argv[argv.index("-m") + 1]
        if module.startswith(HEAVY_MODULES):
            return f"python -m {module}"
    return None


def _install_quick_guard() -> None:
    popen_init = subprocess.Popen.__init__
    process_start = multiprocessing.process.BaseProcess.start

    def guarded_popen_init(self: subprocess.Popen[Any], *args: Any, **kwargs: Any) -> None:
        what = _heavy(args[0] if args else kwargs.get("args", ()))
        if what is not None:
            _offend(f"starts {what}")
        popen_init(self, *args, **kwargs)

    def guarded_start(self: multiprocessing.process.BaseProcess) -> None:
        _offend(f"starts a process ({type(self).__name__} {self.name}), as a Dask cluster's workers are started")
        process_start(self)

    subprocess.Popen.__init__ = guarded_popen_init  # type: ignore[method-assign]
    multiprocessing.process.BaseProcess.start = guarded_start  # type: ignore[method-assign]


def _offend(what: str) -> None:
    message = f"a quick test {what}: mark it slow (see tests/conftest.py)"
    _offences.append(message)
    raise RuntimeError(message)


def pytest_configure(config: pytest.Config) -> None:
    if config.getoption("quick"):
        _install_quick_guard()


@pytest.fixture(autouse=True)
def _quick_guard() -> Iterator[None]:
    """Fails a quick test that started something heavy, even where the error was caught (a worker thread's)."""
    yield
    if _offences:
        message = _offences[0]
        _offences.clear()
        pytest.fail(message, pytrace=False)


# -- a real IPython shell ------------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def _session_shell() -> InteractiveShell:
    shell = start_ipython()
    assert shell is not None
    return shell


@contextlib.contextmanager
def _config_kept(shell: InteractiveShell) -> Iterator[None]:
    """The shell's ``%config`` settings as they were, afterwards: the session's shell outlives a test, and the next
    ``%load_ext`` would make its magics with what a test set (an idle timeout, a GPU limit)."""
    saved = copy.deepcopy(shell.config)
    try:
        yield
    finally:
        for section in [name for name in shell.config if name not in saved]:
            del shell.config[section]
        for section, settings in saved.items():
            shell.config[section] = settings


@pytest.fixture(scope="module")
def loaded_shell(
    _session_shell: InteractiveShell, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[InteractiveShell]:
    """The test shell with ``%load_ext gpu_magics`` done and a runtime dir of its own, for a whole module (so a
    cluster may outlive single tests); unloaded, with the module's ``t_`` names removed, afterwards."""
    from gpu_magics.cluster.records import record as cluster_records

    previous = os.environ.get(cluster_records.RUNTIME_DIR_ENV)
    os.environ[cluster_records.RUNTIME_DIR_ENV] = str(tmp_path_factory.mktemp("runtime"))
    _session_shell.run_line_magic("load_ext", "gpu_magics")
    try:
        with _config_kept(_session_shell):
            yield _session_shell
    finally:
        _session_shell.run_line_magic("unload_ext", "gpu_magics")
        if previous is None:
            del os.environ[cluster_records.RUNTIME_DIR_ENV]
        else:
            os.environ[cluster_records.RUNTIME_DIR_ENV] = previous
        for name in [n for n in _session_shell.user_ns if n.startswith("t_")]:
            del _session_shell.user_ns[name]


@pytest.fixture
def ip(_session_shell: InteractiveShell) -> Iterator[InteractiveShell]:
    """A real IPython shell with ``%load_ext gpu_magics`` done; unloaded again afterwards."""
    shell = _session_shell
    shell.run_line_magic("load_ext", "gpu_magics")
    try:
        with _config_kept(shell):
            yield shell
    finally:
        shell.run_line_magic("unload_ext", "gpu_magics")
        for name in [n for n in shell.user_ns if n.startswith("t_")]:
            del shell.user_ns[name]
