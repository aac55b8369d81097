"""Units below every engine: how bytes, rates, percentages, counts, durations and clock times are written, and
what an error becomes: its one-line form for the user (``one_line``) and, where a catch lets it go, its trace in
the package's one logger, ``gpu_magics`` (``dropped``; in a kernel that logger writes to the kernel's log file only,
never to the notebook: ``cluster.background.start_logs.package_logs_to_file``). ``cluster/``, ``gpurun/``,
``spmd/`` and ``display/`` all write numbers through this module (``display.format`` adds the styles and tables of
the notebook's displays on top).

Bytes are in binary units (B, KiB, MiB, GiB, TiB), as NVML reports them and as the JupyterLab side panel
writes them: ``format_bytes``, ``format_percent`` and ``format_number`` give the same strings as
``formatBytes``, ``formatPercent`` and ``formatNumber`` in ``labextension/src/format.ts`` (pinned by
``tests/data/format_cases.json``). An unknown value reads as an en dash. Durations are written by
``format_seconds`` everywhere (``"518 ms"``, ``"2.31 s"``, ``"2 min 5 s"``); how long ago something started
(a cluster's uptime) by ``format_age``, as the side panel's ``formatAge``.
"""

from __future__ import annotations

import logging
import math
import time
from decimal import ROUND_HALF_UP, Decimal

DASH = "\u2013"
"""An unknown value."""

_UNITS = ("B", "KiB", "MiB", "GiB", "TiB")


def _known(value: float | None) -> bool:
    return value is not None and math.isfinite(value)


def _to_fixed(value: float, digits: int) -> str:
    """JavaScript's ``value.toFixed(digits)`` for ``0 <= value < 1e21``: the exact value, halves rounded up."""
    return str(Decimal(value).quantize(Decimal(1).scaleb(-digits), rounding=ROUND_HALF_UP))


def _round(value: float) -> int:
    """JavaScript's ``Math.round``: the nearest integer, halves towards +infinity."""
    whole = math.floor(value)
    return whole + 1 if value - whole >= 0.5 else whole


def format_bytes(n: float | None) -> str:
    """``'512 B'``, ``'1.5 KiB'``, ``'67.2 GiB'``, ``'140 GiB'``: one decimal below 100, none from 100 or in B."""
    if n is None or not _known(n):
        return DASH
    value, unit = abs(float(n)), 0
    while value >= 1024 and unit < len(_UNITS) - 1:
        value /= 1024
        unit += 1
    digits = 0 if unit == 0 or value >= 100 else 1
    return f"{'-' if n < 0 else ''}{_to_fixed(value, digits)} {_UNITS[unit]}"


def format_rate(received: float | None, sent: float | None) -> str:
    """A link's throughput both ways: ``'↓1.2 GiB/s ↑340 MiB/s'``; an en dash when neither is known."""
    if received is None and sent is None:
        return DASH
    return f"\u2193{format_bytes(received)}/s \u2191{format_bytes(sent)}/s"


def format_percent(value: float | None) -> str:
    """``49.6`` -> ``'50%'``."""
    return DASH if value is None or not _known(value) else f"{_round(value)}%"


def format_number(value: float | None, unit: str) -> str:
    """``(64.6, '°C')`` -> ``'65 °C'``."""
    return DASH if value is None or not _known(value) else f"{_round(value)} {unit}"


def format_count(n: float | None) -> str:
    """``1000000`` -> ``'1,000,000'``; None or NaN -> ``'?'``."""
    return "?" if n is None or not _known(n) else f"{int(n):,}"


def format_seconds(seconds: float | None) -> str:
    """A duration, three significant digits below two minutes: ``'87.1 us'``, ``'76.0 ms'``, ``'2.31 s'``,
    ``'12.3 s'``, then ``'2 min 5 s'``, ``'1 h 4 min'``."""
    if seconds is None or not _known(seconds):
        return DASH
    if seconds >= 120:  # whole units, rounded before they are split: never "2 min 60 s"
        if round(seconds / 60) >= 60:
            hours, minutes = divmod(round(seconds / 60), 60)
            return f"{hours} h {minutes} min"
        minutes, rest = divmod(round(seconds), 60)
        return f"{minutes} min {rest} s"
    if seconds >= 10:
        return f"{seconds:.1f} s"
    if seconds >= 1:
        return f"{seconds:.2f} s"
    milliseconds = float(f"{seconds * 1e3:.3g}")  # 0.99996 s is 1.00 s, not 1e+03 ms
    if milliseconds >= 1000:
        return "1.00 s"
    if milliseconds >= 1:
        return f"{_three_digits(milliseconds)} ms"
    return f"{_three_digits(seconds * 1e6)} us"


def _three_digits(value: float) -> str:
    """Three significant digits, trailing zeros kept: ``76.0``, ``5.00``, ``523``."""
    rounded = float(f"{value:.3g}")
    return f"{rounded:.{2 if rounded < 10 else 1 if rounded < 100 else 0}f}"


def format_age(started_at: float, now: float) -> str:
    """How long ago ``started_at`` was (seconds since the epoch): ``'3 s'``, ``'5 min'``, ``'2.5 h'``."""
    seconds = max(0, _round(now - started_at))
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{_round(seconds / 60)} min"
    return f"{_to_fixed(seconds / 3600, 1)} h"


def format_clock(moment: float, now: float) -> str:
    """The local clock time of ``moment`` (seconds since the epoch): ``'14:03:12'`` on the day of ``now``, else
    ``'Mar 03 14:03'``; a moment said this way stays true in a saved output, where a duration would freeze."""
    local, today = time.localtime(moment), time.localtime(now)
    if (local.tm_year, local.tm_yday) == (today.tm_year, today.tm_yday):
        return time.strftime("%H:%M:%S", local)
    return time.strftime("%b %d %H:%M", local)


def format_duration(seconds: float) -> str:
    """A timeout or the time left on it: ``'45 s'``, ``'30 min'``, ``'1 h 30 min'`` (as ``formatDuration``)."""
    seconds = max(0, _round(seconds))
    if seconds < 60:
        return f"{seconds} s"
    minutes = _round(seconds / 60)
    if minutes < 60:
        return f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h" + (f" {minutes} min" if minutes else "")


def one_line(error: BaseException) -> str:
    """``"TypeName: first line of the message"``: an error as a user reads it in one line."""
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0]}" if text else type(error).__name__


logger = logging.getLogger("gpu_magics")
"""The package's one logger; every module's own logger (``gpu_magics.<module>``) is below it."""

_said: set[tuple[str, str]] = set()


def dropped(what: str, error: BaseException, *, level: int = logging.DEBUG, once: bool = False) -> None:
    """Log, with its traceback, that ``what`` failed with ``error`` and the code went on without it. ``once``: only
    the first time ``what`` fails with this type of error in this process (for a loop that would repeat it)."""
    if once:
        key = (what, type(error).__qualname__)
        if key in _said:
            return
        _said.add(key)
    logger.log(level, "%s (let go): %s: %s", what, type(error).__name__, error, exc_info=error)
