"""Bad input is refused in one line, through a real IPython shell: a ``%config`` value the magics refuse fails its
cell (IPython's ``%config`` would only log it), ``--client`` takes no name that holds something else, ``%gpugraph``
reads no option as code; and only ``text/errors.py`` makes IPython's ``UsageError`` (the package raises its own)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output

from tests.test_kernel_faults import loaded_kernel

PACKAGE = Path(__file__).resolve().parents[1] / "gpu_magics"

REFUSED_SETTINGS = {
    '%config ClusterMagics.park_after = "soon"': (
        "%config ClusterMagics.park_after = 'soon': takes a duration in quotes, at least 1s, like '90s', '30m' or "
        "'2h', or 'off'; it stays 'off'"
    ),
    "%config ClusterMagics.park_after = -5": "%config ClusterMagics.park_after = -5: takes a duration in quotes",
    "%config ClusterMagics.idle_timeout = 'soon'": "%config ClusterMagics.idle_timeout = 'soon': takes a duration",
    "%config GpuMagics.default_backend = 'warp'": (
        "%config GpuMagics.default_backend = 'warp': takes one of 'cpu-single', 'cpu-threads', 'gpu', "
        "'multi-gpu', 'auto'; it stays 'auto'"
    ),
    "%config GpuMagics.gpu_threads = 0": "%config GpuMagics.gpu_threads = 0: takes a whole number of at least 1",
    "%config GpuMagics.spmd_timeout_min = 1e12": (
        "%config GpuMagics.spmd_timeout_min = 1000000000000.0: takes a number from 0.05 to 1440; it stays 5.0"
    ),
    "%config ClusterMagics.free_memory = 2": (
        "%config ClusterMagics.free_memory = 2: free_memory is a share of a GPU's memory, from 0 to 1 (like 0.1), "
        "not 2; it stays 0.1"
    ),
}


@pytest.mark.parametrize("cell", list(REFUSED_SETTINGS))
def test_a_refused_config_value_fails_its_cell_in_one_line(ip: InteractiveShell, cell: str) -> None:
    name = cell.split()[1].split(".")[1]
    magics = ip.magics_manager.registry[cell.split()[1].split(".")[0]]
    before = getattr(magics, name)
    with capture_output() as shown:
        result = ip.run_cell(f"t_before = 1\n{cell}\nt_after = 1\n")
    assert not result.success  # a Run All stops here
    assert type(result.error_in_exec) is UsageError  # IPython's own: the notebook shows its one line
    said = str(result.error_in_exec)
    assert said.startswith(REFUSED_SETTINGS[cell]) and "\n" not in said
    assert getattr(magics, name) == before  # the value stays
    assert "t_before" in ip.user_ns and "t_after" not in ip.user_ns  # the cell stopped at the %config
    assert "ERROR:root" not in shown.stdout + shown.stderr and "Traceback" not in shown.stdout + shown.stderr


@pytest.mark.parametrize(
    "cell",
    [
        "if True:\n    for _ in range(1):\n        %config ClusterMagics.park_after = 'soon'\nt_after = 1",
        "try:\n    pass\nfinally:\n    t_got = %config ClusterMagics.park_after = 'soon'\nt_after = 1",
        "%%gpurun cpu-single -q\n%config ClusterMagics.park_after = 'soon'\nt_after = 1",
    ],
    ids=["in nested blocks", "assigned in a finally block", "in a %%gpurun cell"],
)
def test_a_refused_config_value_fails_its_cell_wherever_the_line_sits(ip: InteractiveShell, cell: str) -> None:
    for _ in range(2):  # the second run meets what the first one kept (the %%gpurun cell's transformed text)
        result = ip.run_cell(cell)
        assert not result.success and type(result.error_in_exec) is UsageError, result
        assert str(result.error_in_exec).startswith("%config ClusterMagics.park_after = 'soon': takes a duration")
        assert "t_after" not in ip.user_ns


def test_a_good_config_value_and_the_value_asked_for_pass(ip: InteractiveShell) -> None:
    magics = ip.magics_manager.registry["ClusterMagics"]
    try:
        assert ip.run_cell("%config ClusterMagics.idle_timeout = '30m'").success
        assert magics.idle_timeout == "30m"
        result = ip.run_cell("%config ClusterMagics.idle_timeout")
        assert result.success and result.result == "30m"  # the cell's value, as without the check
        assert ip.run_cell("t_value = %config GpuMagics.default_backend").success
        assert ip.user_ns["t_value"] == "auto"
    finally:
        magics.idle_timeout = "off"


def test_a_refused_value_set_outside_a_cell_is_raised_as_before(ip: InteractiveShell) -> None:
    """``run_line_magic`` from code: ``%config`` logs the refusal (its own way), and the value stays."""
    magics = ip.magics_manager.registry["GpuMagics"]
    ip.run_line_magic("config", "GpuMagics.default_backend = 'warp'")
    assert magics.default_backend == "auto"
    assert ip.run_cell("%config GpuMagics.default_backend = 'gpu'").success  # nothing left over for the next
    magics.default_backend = "auto"


def test_a_config_line_that_fails_leaves_no_mark_for_code_after_its_cell(
    ip: InteractiveShell, caplog: pytest.LogCaptureFixture
) -> None:
    with capture_output():
        assert not ip.run_cell("%config ClusterMagics.park_after soon", store_history=True).success  # IPython's own
    code = (
        "t_magic = getattr(get_ipython(), 'run_line_magic')\nt_magic('config', \"GpuMagics.default_backend = 'warp'\")"
    )
    assert ip.run_cell(code, store_history=True).success  # a %config no cell runs itself: as before, logged
    assert "%config GpuMagics.default_backend = 'warp': takes one of" in caplog.text


def test_client_refuses_a_name_that_holds_something_else(ip: InteractiveShell) -> None:
    ip.user_ns["t_taken"] = 5
    with capture_output():
        result = ip.run_cell("%gpucluster status --client t_taken")
    assert not result.success
    assert str(result.error_in_exec) == (
        "%gpucluster --client t_taken: t_taken holds a int already; choose another name (or del t_taken first)"
    )
    assert ip.user_ns["t_taken"] == 5


def test_client_refuses_a_builtin_name(ip: InteractiveShell) -> None:
    with capture_output():
        result = ip.run_cell("%gpucluster status --client print")
    assert not result.success and "print" not in ip.user_ns
    assert "invalid variable name 'print': it would hide Python's built-in print" in str(result.error_in_exec)


@pytest.mark.parametrize(
    ("line", "said"),
    [
        ("t_graph --frob", "%gpugraph: unknown option --frob; %gpugraph takes no options, only an expression"),
        ("t_graph --depth=3", "%gpugraph: unknown option --depth=3"),
        ("t_graph -v", "%gpugraph: unknown option -v"),
        ("t_graph - t_nothing", "%gpugraph: name 't_nothing' is not defined"),
    ],
)
def test_gpugraph_refuses_options_as_options(ip: InteractiveShell, line: str, said: str) -> None:
    import dask.array as da

    ip.user_ns["t_graph"] = da.ones(4, chunks=2)
    with pytest.raises(UsageError) as caught:
        ip.run_line_magic("gpugraph", line)
    assert str(caught.value).startswith(said) and "\n" not in str(caught.value)


def test_only_the_errors_module_makes_ipythons_usage_error() -> None:
    """The package raises its own errors; ``said_in_one_line`` (and ``shown_as_one_line``) turn them into IPython's
    ``UsageError`` where the notebook must show one line."""
    made = re.compile(r"\bUsageError\(")
    strays = sorted(
        str(path.relative_to(PACKAGE.parent))
        for path in PACKAGE.rglob("*.py")
        if made.search(path.read_text(encoding="utf-8")) and path != PACKAGE / "text" / "errors.py"
    )
    assert strays == []
    assert made.search((PACKAGE / "text" / "errors.py").read_text(encoding="utf-8"))


def test_a_refused_value_is_not_kept_for_the_next_load(ip: InteractiveShell) -> None:
    """IPython merges what ``%config`` sets into every configurable's config, the shell's too, from which the next
    ``%load_ext`` makes the magics: a refused value is taken out again."""
    with capture_output():
        assert not ip.run_cell("%config ClusterMagics.park_after = 'soon'").success
    ip.run_line_magic("unload_ext", "gpu_magics")
    ip.run_line_magic("load_ext", "gpu_magics")
    assert ip.magics_manager.registry["ClusterMagics"].park_after == "off"


@pytest.mark.slow  # a real kernel
def test_a_refused_config_value_stops_a_run_all_in_a_kernel(tmp_path: Path) -> None:
    """In a real kernel: the cell's reply is an error (Jupyter's Run All stops there), shown as its one line."""
    with loaded_kernel(tmp_path) as kernel:
        reply, text = kernel.run('%config ClusterMagics.park_after = "soon"\nprint("after")')
        assert reply["status"] == "error" and reply["ename"] == "UsageError"
        assert "%config ClusterMagics.park_after = 'soon': takes a duration in quotes" in text
        assert "after" not in text.replace("park_after", "") and "ERROR:root" not in text and "Traceback" not in text
        assert kernel.ok("%config ClusterMagics.park_after").strip() == "'off'"


def test_a_refusal_says_the_registered_magics_value_whatever_other_instances_hold(
    ip: InteractiveShell,
) -> None:
    """An instance made outside the extension (and closed after) neither speaks for the cell nor outlives its close
    in the shell's configurables (``%config`` sets every configurable of the class)."""
    from gpu_magics.magics.gpucluster import ClusterMagics

    strays = [ClusterMagics(shell=ip) for _ in range(8)]  # %config sets a set of them, in no fixed order: with
    for stray in strays:  # eight, the registered one nearly never comes first (the old gate then said nothing)
        stray.free_memory = 0.3
    registered = ip.magics_manager.registry["ClusterMagics"]
    try:
        result = ip.run_cell("%config ClusterMagics.free_memory = 2")
        assert type(result.error_in_exec) is UsageError
        assert str(result.error_in_exec).endswith("; it stays 0.1"), result.error_in_exec
        assert registered.free_memory == 0.1 and {stray.free_memory for stray in strays} == {0.3}
    finally:
        for stray in strays:
            stray.close()
    assert not any(configurable in strays for configurable in ip.configurables)
