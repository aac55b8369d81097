"""Turning a magic's line into arguments: shlex + argparse, every failure a one-line ``UsageError``."""

from __future__ import annotations

import argparse
import re
import shlex
from typing import NoReturn

from IPython.core.error import UsageError


class MagicArgumentParser(argparse.ArgumentParser):
    """An ``ArgumentParser`` that raises ``UsageError`` with one line instead of printing and exiting."""

    def __init__(self, prog: str, dash_values: tuple[str, ...] = (), **kwargs: object) -> None:
        super().__init__(prog=prog, add_help=False, allow_abbrev=False, exit_on_error=False, **kwargs)  # type: ignore[arg-type]
        self.dash_values = dash_values  # options whose value may itself start with "-" (an sbatch directive)

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{self.prog}: {message}. See {self.prog}? for the options.")

    def exit(self, status: int = 0, message: str | None = None) -> NoReturn:
        raise UsageError(f"{self.prog}: {(message or 'invalid arguments').strip()}")

    def parse_line(self, line: str) -> argparse.Namespace:
        """Split ``line`` like a shell would and parse it; unknown options are an error."""
        try:
            words = shlex.split(line, posix=True)
        except ValueError as error:
            raise UsageError(f"{self.prog}: {error} in {line.strip()!r}: close the quote.") from None
        words = self._joined_dash_values(words)
        try:
            namespace, extra = self.parse_known_args(words)
        except argparse.ArgumentError as error:
            self.error(str(error))
        if extra:
            unknown = " ".join(extra)
            self.error(f"unrecognized arguments: {unknown} (valid options: {', '.join(self.option_names())})")
        return namespace

    def _joined_dash_values(self, words: list[str]) -> list[str]:
        """``--job-option --constraint=a100`` as ``--job-option=--constraint=a100``: argparse would take a value
        that starts with "-" for an option of its own."""
        joined: list[str] = []
        rest = iter(words)
        for word in rest:
            if word in self.dash_values:
                value = next(rest, None)
                joined.append(word if value is None else f"{word}={value}")
            else:
                joined.append(word)
        return joined

    def option_names(self) -> list[str]:
        """The long form of every option, for error messages."""
        names = []
        for action in self._actions:
            if action.option_strings:
                names.append(max(action.option_strings, key=len))
        return names


def _int_at_least(minimum: int, text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < minimum:
        raise argparse.ArgumentTypeError(f"expected a number of at least {minimum}, got {value}")
    return value


def positive_int(text: str) -> int:
    """``argparse`` type: an integer of at least 1."""
    return _int_at_least(1, text)


def non_negative_int(text: str) -> int:
    """``argparse`` type: an integer of at least 0."""
    return _int_at_least(0, text)


def positive_float(text: str) -> float:
    """``argparse`` type: a finite number above 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a number above 0, got {text}")
    return value


def non_negative_float(text: str) -> float:
    """``argparse`` type: a finite number of at least 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not value >= 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a number of at least 0, got {text}")
    return value


def comma_list(text: str, what: str) -> list[str]:
    """The entries of the comma list ``text``, stripped; an empty one (``a,,b``, or a comma at either end) is an
    ``argparse.ArgumentTypeError`` of one line (``what`` names the entries: ``"backends"``, ``"GPU indices"``)."""
    entries = [entry.strip() for entry in text.split(",")]
    if "" in entries:
        raise argparse.ArgumentTypeError(
            f"{text!r} has an empty entry: separate {what} with single commas, none at either end"
        )
    return entries


_DURATION = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*(s|sec|m|min|h)\s*$", re.IGNORECASE)
_SECONDS = {"s": 1.0, "sec": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0}
DURATION_OFF = ("off", "none", "never", "0")


def duration(text: str) -> float:
    """``argparse`` type: seconds in ``"90s"``, ``"30m"`` or ``"2h"``, at least 1 s; ``0.0`` for ``"off"`` (or
    ``"0"``)."""
    if text.strip().lower() in DURATION_OFF:
        return 0.0
    found = _DURATION.match(text)
    if found is None:
        raise argparse.ArgumentTypeError(f"invalid duration {text!r}: use a number and a unit (90s, 30m, 2h) or off")
    seconds = float(found.group(1)) * _SECONDS[found.group(2).lower()]
    if seconds < 1:
        raise argparse.ArgumentTypeError(f"invalid duration {text!r}: at least 1s, or off")
    return seconds
