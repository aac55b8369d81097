"""A real jupyter-server with the gpu_magics extension on fake GPUs (pytest-jupyter fixtures, scoped here)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

# The pytest-jupyter fixtures (and its async-test hooks) for the tests in this directory only.
from pytest_jupyter.jupyter_server import *  # noqa: F403

from gpu_magics.server.service import close_all


@pytest.fixture
def runtime_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Where cluster discovery records go during the test."""
    directory = tmp_path / "gpu-magics-runtime"
    directory.mkdir()
    monkeypatch.setenv("GPU_MAGICS_RUNTIME_DIR", str(directory))
    yield directory


@pytest.fixture  # type: ignore[no-redef]  # overrides pytest-jupyter's
def jp_server_config(runtime_dir: Path) -> dict[str, Any]:
    return {
        "ServerApp": {"jpserver_extensions": {"gpu_magics": True}},
        "GpuMagicsServer": {"source": "fake", "fake_gpus": 2, "interval": 0.1, "history": 50},
    }


@pytest.fixture(autouse=True)
def _close_monitor_services() -> Iterator[None]:
    """Stop the sampler threads of the test's server (a real server stops them at interpreter exit)."""
    yield
    close_all()
