"""JSON for the wire: non-finite floats become ``null`` (browsers' ``JSON.parse`` rejects ``NaN``)."""

from __future__ import annotations

import json
import math
from typing import Any


def finite(value: Any) -> Any:
    """``value`` with every NaN or infinity (at any depth) replaced by ``None``."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: finite(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [finite(item) for item in value]
    return value


def dumps(value: Any) -> str:
    """Compact JSON; never emits ``NaN``."""
    try:
        return json.dumps(value, separators=(",", ":"), allow_nan=False)
    except ValueError:
        return json.dumps(finite(value), separators=(",", ":"), allow_nan=False)
