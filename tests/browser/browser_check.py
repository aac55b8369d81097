"""``python -m jupyterlab.browser_check``, except that the browser is the system Chromium driven by
playwright-core (JupyterLab's own check would download a browser with ``npx playwright install``).

The server side is JupyterLab's: it fails on any error logged while the page loads. Run it as
``python tests/browser/browser_check.py`` after ``tests/browser/setup.sh``; exit status 0 means it passed.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

from jupyterlab import browser_check
from jupyterlab.browser_check import BrowserApp

HERE = Path(__file__).resolve().parent


async def run_browser(url: str) -> None:
    """Load JupyterLab at ``url`` in the system Chromium; raise if the page reports an error."""
    process = await asyncio.create_subprocess_exec("node", str(HERE / "check_lab.mjs"), url, cwd=HERE)
    if await process.wait() != 0:
        raise RuntimeError("the browser check failed (see the output above)")


class CheckApp(BrowserApp):
    """JupyterLab's ``BrowserApp``, served as an extension of this module (as ``python -m`` would)."""

    name = __name__


def _jupyter_server_extension_points() -> list[dict[str, Any]]:
    return [{"module": __name__, "app": CheckApp}]


def main(argv: list[str] | None = None) -> Any:
    # BrowserApp looks ``run_browser`` up in its module when the server starts: point it at ours.
    browser_check.run_browser = run_browser
    return CheckApp.launch_instance(argv=argv)


if __name__ == "__main__":
    sys.exit(main())
