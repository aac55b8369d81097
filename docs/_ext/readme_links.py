"""The README's links into ``docs/`` lead to pages (and headings) of the built site: checked when an HTML build
ends, each one that does not as a warning (which ``-W`` makes an error)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from sphinx.application import Sphinx
from sphinx.util import logging

_log = logging.getLogger(__name__)
ROOT = Path(__file__).resolve().parents[2]
LINK = re.compile(r"\]\((docs/[^)\s#]+)(?:#([^)\s]+))?\)")


def built(link: str, outdir: Path) -> Path:
    """Where the site holds what ``link`` (relative to the repository root) names: a page's HTML, or the file."""
    inside = Path(link).relative_to("docs")
    return outdir / (inside.with_suffix(".html") if inside.suffix in (".md", ".ipynb") else inside)


def broken(readme: str, outdir: Path) -> list[str]:
    """The README's links into docs/ that the built site lacks (a page, a file or a heading's anchor)."""
    found = []
    for link, anchor in LINK.findall(readme):
        target = built(link, outdir)
        if not target.is_file():
            found.append(f"{link}: not in the built site (no {target.relative_to(outdir)})")
        elif anchor and f'id="{anchor}"' not in target.read_text(encoding="utf-8"):
            found.append(f"{link}#{anchor}: the page has no such heading")
    return found


def _on_build_finished(app: Sphinx, exception: Exception | None) -> None:
    if exception is not None or app.builder.format != "html":
        return
    for line in broken((ROOT / "README.md").read_text(encoding="utf-8"), Path(app.outdir)):
        _log.warning("README.md links to %s", line)


def setup(app: Sphinx) -> dict[str, Any]:
    app.connect("build-finished", _on_build_finished)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
