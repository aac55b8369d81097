"""The documentation's screenshots (docs/_static/screenshots): every picture its manifest lists is there, in both
themes, small enough to keep in the repository, and no picture lies there unlisted. The browser tests make them."""

from __future__ import annotations

import re
from pathlib import Path

SCREENSHOTS = Path(__file__).resolve().parents[1] / "docs" / "_static" / "screenshots"
LIMIT = 300 * 1024  # bytes a picture may take


def listed() -> set[str]:
    """The file names the manifest's table lists."""
    return set(re.findall(r"`([\w-]+-(?:light|dark)\.png)`", (SCREENSHOTS / "README.md").read_text("utf-8")))


def test_every_listed_picture_is_there_in_both_themes_and_small() -> None:
    names = listed()
    views = {name.rsplit("-", 1)[0] for name in names}
    assert {"panel", "cluster-card", "monitor", "spmd-status", "spmd-progress"} <= views
    assert names == {f"{view}-{theme}.png" for view in views for theme in ("light", "dark")}
    for name in sorted(names):
        path = SCREENSHOTS / name
        assert path.is_file(), f"{name} is listed but missing (run the browser tests: pytest -m browser)"
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", name
        assert path.stat().st_size < LIMIT, f"{name} takes {path.stat().st_size} bytes"


def test_no_picture_is_left_unlisted() -> None:
    assert {path.name for path in SCREENSHOTS.glob("*.png")} <= listed()


def _shown(out: Path) -> bytes:
    """The bytes of the one picture the built page shows."""
    found = re.search(r'<img[^>]* src="([^"]+)"', (out / "sub" / "page.html").read_text("utf-8"))
    assert found is not None
    return (out / "sub" / found.group(1)).read_bytes()


def test_the_docs_show_the_pictures_the_browser_tests_took_else_the_committed_ones(tmp_path: Path) -> None:
    """The browser tests write their pictures to docs/_build/screenshots (ignored by git), so a test run leaves the
    committed ones unchanged; the docs build shows those taken where they are, and notices them coming and going."""
    from sphinx.application import Sphinx

    docs = Path(__file__).resolve().parents[1] / "docs"
    src = tmp_path / "src"
    (src / "_static" / "screenshots").mkdir(parents=True)
    (src / "sub").mkdir()
    (src / "conf.py").write_text(
        f"import sys\nsys.path.insert(0, {str(docs / '_ext')!r})\nextensions = ['screenshots']\n"
        "exclude_patterns = ['_build']\n"
    )
    (src / "index.rst").write_text("Index\n=====\n\n.. toctree::\n\n   sub/page\n")
    (src / "sub" / "page.rst").write_text("Page\n====\n\n.. image:: ../_static/screenshots/panel-light.png\n")
    (src / "_static" / "screenshots" / "panel-light.png").write_bytes(b"\x89PNG committed")
    taken = src / "_build" / "screenshots" / "panel-light.png"

    def build() -> bytes:
        out = tmp_path / "html"
        Sphinx(src, src, out, tmp_path / "doctrees", "html", status=None, warningiserror=True).build()
        return _shown(out)

    assert build() == b"\x89PNG committed"
    taken.parent.mkdir(parents=True)
    taken.write_bytes(b"\x89PNG taken by the browser tests")
    assert build() == b"\x89PNG taken by the browser tests"  # the page is read again: its picture was taken
    taken.unlink()
    assert build() == b"\x89PNG committed"
