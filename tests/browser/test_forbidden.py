"""When the server no longer accepts the page's credentials, the panel says so, stops retrying and offers Retry
(screenshots in light and dark at the default sidebar width)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from .conftest import HERE, REPO, Lab

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.timeout(400)]


@pytest.mark.parametrize("theme", ["light", "dark"])
def test_panel_stops_retrying_when_refused(lab: Lab, tmp_path: Path, theme: str) -> None:
    artifacts = REPO / "test-artifacts" / "browser"
    artifacts.mkdir(parents=True, exist_ok=True)
    node = subprocess.Popen(
        ["node", str(HERE / "forbidden.mjs"), lab.url, lab.token, theme],
        env={**os.environ, "ARTIFACTS": str(artifacts)},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert node.stdout is not None
    lines = []
    try:
        for line in node.stdout:
            lines.append(line)
            if line.strip() == "READY":
                lab.stop()
                for secret in tmp_path.rglob("jupyter_cookie_secret"):
                    secret.unlink()  # the page's login cookie no longer holds either
                lab.token = os.urandom(16).hex()
                lab.start()
                break
        lines.extend(node.stdout)
        assert node.wait(300) == 0, "".join(lines)
    finally:
        if node.poll() is None:
            node.kill()
    text = "".join(lines)
    assert "The server refused the GPU panel (403)" in text
    assert "sockets opened while refused: 0" in text
    assert "is refused again" in text
