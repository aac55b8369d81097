"""Waiting in tests for something another process or thread does, with a bound."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any


def wait_for(predicate: Callable[[], Any], timeout: float = 20.0, what: str = "condition", step: float = 0.1) -> Any:
    """The first truthy value ``predicate`` returns within ``timeout`` seconds; an AssertionError naming ``what``
    when none comes."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(step)
    raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
