"""IPython formatters for dask arrays and CuPy arrays, registered by type name so nothing is imported.

The displays are static HTML with a plain-text fallback by default: that renders in a live kernel, a saved
notebook, nbconvert and a terminal alike. ``set_mode("widget")`` (or ``"auto"``: only in a kernel) wraps the HTML
in an ipywidgets ``HTML`` whose bundle still carries the HTML and text fallbacks. Note that JupyterLab prefers the
widget view: a notebook saved without widget state and reopened after its kernel is gone shows "model not found"
there (nbconvert and other front ends show the HTML fallback). The magics' live panels use no widget.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from functools import cache
from typing import Any, Literal

from IPython.core.formatters import BaseFormatter
from IPython.core.interactiveshell import InteractiveShell

Mode = Literal["html", "widget", "auto"]
Bundle = dict[str, Any]

DASK_ARRAY_TYPES = (("dask.array.core", "Array"), ("dask.array._array_expr._collection", "Array"))
CUPY_ARRAY_TYPES = (("cupy", "ndarray"),)
_STATE_KEY = "_gpu_magics_formatters"
_log = logging.getLogger(__name__)
_mode: list[Mode] = ["html"]


def set_mode(mode: Mode) -> None:
    """Render as static ``"html"`` (default), always as a ``"widget"``, or ``"auto"``: widget in a kernel."""
    if mode not in ("html", "widget", "auto"):
        raise ValueError(f"mode must be 'html', 'widget' or 'auto', not {mode!r}")
    _mode[0] = mode


def get_mode() -> Mode:
    """The current rendering mode."""
    return _mode[0]


@cache
def _widget_class() -> type:
    import ipywidgets

    class FallbackHTML(ipywidgets.HTML):
        """An HTML widget whose mimebundle also carries static HTML and plain-text fallbacks."""

        def __init__(self, html: str, text: str) -> None:
            super().__init__(value=html)
            self._fallback = {"text/html": html, "text/plain": text}

        def _repr_mimebundle_(self, **kwargs: Any) -> Bundle:
            bundle = dict(super()._repr_mimebundle_(**kwargs) or {})
            bundle.update(self._fallback)
            return bundle

    return FallbackHTML


def as_widget(view: Any) -> Any:
    """An ipywidgets ``HTML`` showing ``view`` (anything with ``html()`` and ``text()``), with fallbacks."""
    return _widget_class()(view.html(), view.text())


def _use_widget(shell: InteractiveShell) -> bool:
    mode = _mode[0]
    return mode == "widget" or (mode == "auto" and getattr(shell, "kernel", None) is not None)


def _printer(shell: InteractiveShell, make_view: Callable[[Any], Any]) -> Callable[[Any], Bundle | None]:
    def bundle(obj: Any) -> Bundle | None:
        try:
            view = make_view(obj)
            if _use_widget(shell):
                result: Bundle = as_widget(view)._repr_mimebundle_()
                return result
            return {"text/plain": view.text(), "text/html": view.html()}
        except Exception:  # never break the display of a user's object: fall back to its own repr
            _log.debug("gpu_magics display failed for %s", type(obj), exc_info=True)
            return None

    return bundle


def _dask_view(obj: Any) -> Any:
    from gpu_magics.display.objects.array_view import ArrayView

    return ArrayView(obj)


def _cupy_view(obj: Any) -> Any:
    from gpu_magics.display.objects.cupy_view import CupyView

    return CupyView(obj)


def _swap(formatter: BaseFormatter, module: str, name: str, func: Callable[..., Any] | None) -> Any:
    """Remove every printer for ``module.name`` (deferred or resolved), install ``func``; return the old one."""
    old = None
    while (popped := formatter.pop(f"{module}.{name}", None)) is not None:
        old = old or popped
    if func is not None:
        formatter.for_type_by_name(module, name, func)
    return old


def _bundle_formatter(shell: InteractiveShell) -> BaseFormatter:
    display = shell.display_formatter
    assert display is not None
    formatter: BaseFormatter = display.mimebundle_formatter
    return formatter


def register(shell: InteractiveShell) -> None:
    """Install the dask-array and CuPy-array displays in ``shell`` (idempotent)."""
    if getattr(shell, _STATE_KEY, None):
        return
    formatter = _bundle_formatter(shell)
    saved: list[tuple[str, str, Any]] = []
    for types, make_view in ((DASK_ARRAY_TYPES, _dask_view), (CUPY_ARRAY_TYPES, _cupy_view)):
        printer = _printer(shell, make_view)
        for module, name in types:
            saved.append((module, name, _swap(formatter, module, name, printer)))
    setattr(shell, _STATE_KEY, saved)


def unregister(shell: InteractiveShell) -> None:
    """Remove what :func:`register` installed, restoring any printers it replaced."""
    formatter = _bundle_formatter(shell)
    for module, name, old in getattr(shell, _STATE_KEY, None) or []:
        _swap(formatter, module, name, old)
    setattr(shell, _STATE_KEY, [])
