"""The reference pages, written from the code each time the site builds (``docs/reference/generated/``, not
committed): what a page says is what the code defines, so it cannot differ from it.

``pages()`` gives each page's text; ``tests/test_docs_reference.py`` checks it against the code.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

GENERATED = Path("reference") / "generated"


def pages() -> dict[str, str]:
    """Page name (under ``reference/generated/``) -> its Markdown."""
    from reference_pages import magics, metrics, routes, settings

    makers: dict[str, Callable[[], str]] = {
        "magics": magics.page,
        "settings": settings.page,
        "metrics": metrics.page,
        "rest-api": routes.page,
    }
    return {name: make() for name, make in makers.items()}


def write(docs: Path) -> list[Path]:
    """Write the pages under ``docs``; a page whose text is unchanged is left as it is (Sphinx keeps it)."""
    written = []
    folder = docs / GENERATED
    folder.mkdir(parents=True, exist_ok=True)
    texts = pages()
    for name, text in texts.items():
        path = folder / f"{name}.md"
        if not path.exists() or path.read_text(encoding="utf-8") != text:
            path.write_text(text, encoding="utf-8")
        written.append(path)
    for stale in folder.glob("*.md"):
        if stale.stem not in texts:
            stale.unlink()
    return written


def _on_config_inited(app: Any, config: Any) -> None:
    write(Path(app.srcdir))


def setup(app: Any) -> dict[str, Any]:
    app.connect("config-inited", _on_config_inited)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
