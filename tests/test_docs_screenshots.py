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
