"""Shared fixtures: a real IPython shell with the extension loaded."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from IPython.core.interactiveshell import InteractiveShell
from IPython.testing.globalipapp import start_ipython


@pytest.fixture(scope="session")
def _session_shell() -> InteractiveShell:
    shell = start_ipython()
    assert shell is not None
    return shell


@pytest.fixture
def ip(_session_shell: InteractiveShell) -> Iterator[InteractiveShell]:
    """A real IPython shell with ``%load_ext gpu_magics`` done; unloaded again afterwards."""
    shell = _session_shell
    shell.run_line_magic("load_ext", "gpu_magics")
    try:
        yield shell
    finally:
        shell.run_line_magic("unload_ext", "gpu_magics")
        for name in [n for n in shell.user_ns if n.startswith("t_")]:
            del shell.user_ns[name]
