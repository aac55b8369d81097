"""Registering the displays as IPython formatters: by type name, reversible, widget mode with fallbacks."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import Any

import dask.array as da
import pytest
from IPython.core.interactiveshell import InteractiveShell

from gpu_magics.display import formatters
from gpu_magics.display.objects import array_view


@pytest.fixture(autouse=True)
def _no_gpus() -> Iterator[None]:
    array_view.set_gpu_memory_probe(lambda: None)
    yield
    array_view.set_gpu_memory_probe(None)
    formatters.set_mode("html")


def test_dask_array_display(ip: InteractiveShell) -> None:
    data, _ = ip.display_formatter.format(da.ones((100, 100), chunks=10))
    assert "gpu-magics-array" in data["text/html"]
    assert data["text/plain"].startswith("dask.array<") and "100 tasks" in data["text/plain"]


def test_unregister_restores_previous(ip: InteractiveShell) -> None:
    x = da.ones((10, 10), chunks=5)
    formatters.unregister(ip)
    data, _ = ip.display_formatter.format(x)
    assert "gpu-magics-array" not in data.get("text/html", "")  # dask's own display again
    formatters.register(ip)
    formatters.register(ip)  # idempotent
    assert "gpu-magics-array" in ip.display_formatter.format(x)[0]["text/html"]


def test_foreign_printer_restored(ip: InteractiveShell) -> None:
    formatters.unregister(ip)
    bundle = ip.display_formatter.mimebundle_formatter
    bundle.for_type_by_name("dask.array.core", "Array", lambda obj: {"text/plain": "theirs"})
    formatters.register(ip)
    assert ip.display_formatter.format(da.ones(3))[0]["text/plain"].startswith("dask.array<")
    formatters.unregister(ip)
    assert ip.display_formatter.format(da.ones(3))[0]["text/plain"] == "theirs"
    bundle.pop("dask.array.core.Array")
    formatters.register(ip)


def test_broken_display_falls_back(ip: InteractiveShell, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(obj: Any) -> Any:
        raise RuntimeError("bug")

    monkeypatch.setattr(formatters, "_dask_view", broken)
    formatters.unregister(ip)
    formatters.register(ip)
    data, _ = ip.display_formatter.format(da.ones(3))
    assert data["text/plain"].startswith("dask.array<")  # dask's own repr
    monkeypatch.undo()
    formatters.unregister(ip)
    formatters.register(ip)


def test_widget_mode_carries_fallbacks(ip: InteractiveShell) -> None:
    formatters.set_mode("widget")
    data, _ = ip.display_formatter.format(da.ones((10, 10), chunks=5))
    assert "application/vnd.jupyter.widget-view+json" in data
    assert "gpu-magics-array" in data["text/html"] and data["text/plain"].startswith("dask.array<")


def test_auto_mode_without_kernel_is_html(ip: InteractiveShell) -> None:
    formatters.set_mode("auto")
    data, _ = ip.display_formatter.format(da.ones((10, 10), chunks=5))
    assert "application/vnd.jupyter.widget-view+json" not in data
    with pytest.raises(ValueError, match="mode must be"):
        formatters.set_mode("fancy")  # type: ignore[arg-type]


def test_importing_display_imports_nothing_heavy() -> None:
    code = (
        "import sys, gpu_magics.display, gpu_magics.magics.gpugraph\n"
        "bad = [m for m in ('cupy', 'pynvml', 'ipywidgets', 'dask.array') if m in sys.modules]\n"
        "assert not bad, bad\n"
    )
    import subprocess

    subprocess.run([sys.executable, "-c", code], check=True, cwd=_root())


def _root() -> str:
    import pathlib

    return str(pathlib.Path(__file__).resolve().parents[1])
