"""The gateway's cluster options as the line sets them (``--gateway-option KEY=VALUE``, each checked as the
gateway's field does) and as a line describes them."""

from __future__ import annotations

from typing import Any

from gpu_magics.cluster.managers.gateway.service import WHAT, ask, first_line
from gpu_magics.text.errors import LineError


def chosen_options(gateway: Any, pairs: tuple[tuple[str, str], ...]) -> Any:
    """The gateway's cluster options with the line's ``KEY=VALUE`` set (each checked as the gateway's field does);
    a key it does not offer is one line listing those it does."""
    offered = ask(gateway, gateway._cluster_options(), "list its cluster options")
    for key, text in pairs:
        if key not in offered:
            raise LineError(f"{WHAT}: the gateway has no option {key!r}; it offers {describe_options(offered)}")
        field = offered._fields[key]
        try:
            value = _value(field, text)
            _check_bounds(field, value)
            offered[key] = value
        except (TypeError, ValueError) as error:
            raise LineError(f"{WHAT} --gateway-option {key}={text}: {first_line(error)}") from None
    return offered


def _value(field: Any, text: str) -> Any:
    """``text`` as the field's type takes it: a number, a bool, a choice, a mapping (YAML or JSON), or text."""
    from dask_gateway.options import Bool, Float, Integer, Mapping, Select

    if isinstance(field, Integer):
        try:
            return int(text)
        except ValueError:
            raise ValueError(f"expected a whole number, got {text!r}") from None
    if isinstance(field, Float):
        try:
            return float(text)
        except ValueError:
            raise ValueError(f"expected a number, got {text!r}") from None
    if isinstance(field, Bool):
        lowered = text.lower()
        if lowered not in ("true", "false", "yes", "no", "1", "0", "on", "off"):
            raise ValueError(f"expected true or false, got {text!r}")
        return lowered in ("true", "yes", "1", "on")
    if isinstance(field, Select) and text not in field.options:
        raise ValueError(f"choose one of {', '.join(field.options)}")
    if isinstance(field, Mapping):
        import yaml

        try:
            value = yaml.safe_load(text)
        except yaml.YAMLError:
            value = None
        if not isinstance(value, dict):
            raise ValueError('expected a mapping, like {"KEY": "value"}')
        return value
    return text


def _check_bounds(field: Any, value: Any) -> None:
    """A number within the gateway's bounds for it (said in its own units, not dask-gateway's ``4.000000``)."""
    low, high = getattr(field, "min", None), getattr(field, "max", None)
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return
    if low is not None and value < low:
        raise ValueError(f"at least {low:g} on this gateway, got {value:g}")
    if high is not None and value > high:
        raise ValueError(f"at most {high:g} on this gateway, got {value:g}")


def describe_options(offered: Any) -> str:
    """``worker_cores (whole number 1-4, now 1), profile (one of cpu, gpu; now 'cpu'), ...``."""
    from dask_gateway.options import Bool, Integer, Mapping, Number, Select

    parts = []
    for key, field in offered._fields.items():
        now = f"now {field.get()!r}"
        if isinstance(field, Select):
            parts.append(f"{key} (one of {', '.join(field.options)}; {now})")
        elif isinstance(field, Number):
            bounds = ""
            if field.min is not None or field.max is not None:
                low = "" if field.min is None else f"{field.min:g}"
                high = "" if field.max is None else f"{field.max:g}"
                bounds = f" {low}-{high}"
            parts.append(f"{key} ({'whole number' if isinstance(field, Integer) else 'number'}{bounds}, {now})")
        else:
            kind = "true/false" if isinstance(field, Bool) else "mapping" if isinstance(field, Mapping) else "text"
            parts.append(f"{key} ({kind}, {now})")
    return ", ".join(parts) if parts else "none"
