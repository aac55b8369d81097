"""After a server restart the panel says it is reconnecting, then shows live samples again (backoff)."""

from __future__ import annotations

import os
import subprocess

import pytest

from .conftest import HERE, REPO, Lab

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.timeout(400)]


def test_panel_reconnects_after_a_server_restart(lab: Lab) -> None:
    artifacts = REPO / "test-artifacts" / "browser"
    artifacts.mkdir(parents=True, exist_ok=True)
    node = subprocess.Popen(
        ["node", str(HERE / "reconnect.mjs"), lab.url, lab.token],
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
                lab.restart()
                break
        lines.extend(node.stdout)
        assert node.wait(300) == 0, "".join(lines)
    finally:
        if node.poll() is None:
            node.kill()
    assert "live again after the restart" in "".join(lines)
