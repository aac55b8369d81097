"""Turning a magic's line into arguments: shlex + argparse, every failure a one-line ``LineError``; and the value
types the magics' options take (numbers, durations, sizes, GPU choices, addresses, names), pure: no I/O; and the
most threads one pool may run on this host (``check_threads``: the same bound for every magic's thread counts)."""

from __future__ import annotations

import argparse
import builtins
import keyword
import os
import re
import shlex
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import NoReturn

from gpu_magics.text.errors import LineError

_NEGATIVE = re.compile(r"^-\.?\d")  # a value such as -3m or -0.5, not an option


class MagicArgumentParser(argparse.ArgumentParser):
    """An ``ArgumentParser`` that raises ``LineError`` with one line instead of printing and exiting."""

    def __init__(self, prog: str, dash_values: tuple[str, ...] = (), **kwargs: object) -> None:
        super().__init__(prog=prog, add_help=False, allow_abbrev=False, exit_on_error=False, **kwargs)  # type: ignore[arg-type]
        self.dash_values = dash_values  # options whose value may itself start with "-" (an sbatch directive)

    def error(self, message: str) -> NoReturn:
        raise LineError(f"{self.prog}: {message}. See {self.prog}? for the options.")

    def exit(self, status: int = 0, message: str | None = None) -> NoReturn:
        raise LineError(f"{self.prog}: {(message or 'invalid arguments').strip()}")

    def parse_line(self, line: str) -> argparse.Namespace:
        """Split ``line`` like a shell would and parse it; unknown options are an error."""
        try:
            words = shlex.split(line, posix=True)
        except ValueError as error:
            raise LineError(f"{self.prog}: {error} in {line.strip()!r}: close the quote.") from None
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
        """``--job-option --constraint=a100`` as ``--job-option=--constraint=a100``, and ``--idle-timeout -3m``
        as ``--idle-timeout=-3m``: argparse would take a value that starts with "-" for an option of its own (and
        say "expected one argument"), where the option's type has the better words for it."""
        single = {name for action in self._actions if action.nargs is None for name in action.option_strings}
        joined: list[str] = []
        index = 0
        while index < len(words):
            word = words[index]
            value = words[index + 1] if index + 1 < len(words) else None
            if value is not None and (
                word in self.dash_values or (word in single and _NEGATIVE.match(value) is not None)
            ):
                joined.append(f"{word}={value}")
                index += 2
            else:
                joined.append(word)
                index += 1
        return joined

    def described(self, values: Mapping[str, object]) -> MagicArgumentParser:
        """This parser, each option given its words from ``option_help``: what it does (``help``) and what applies
        where a line leaves it out (``left_out``); ``{NAME}`` in them is ``values[NAME]`` (the parser module's
        constants). An option without words, or words for an option it lacks, is a ``KeyError``."""
        from gpu_magics.text.option_help import BY_PROG

        words = BY_PROG[self.prog]
        actions = {flag: action for action in self._actions for flag in action.option_strings}
        unknown = sorted(set(words) - set(actions))
        named = {action for flag, action in actions.items() if flag in words}
        missing = [max(a.option_strings, key=len) for a in self._actions if a.option_strings and a not in named]
        if unknown or missing:
            raise KeyError(f"gpu_magics/text/option_help.py, {self.prog}: words for {unknown}, none for {missing}")
        for flag, (does, left_out) in words.items():
            actions[flag].help = does.format_map(values).replace("%", "%%")  # argparse's help is a %-format
            actions[flag].left_out = left_out.format_map(values)  # type: ignore[attr-defined]
        return self

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


THREADS_PER_CORE = 8  # the most threads one pool of tasks runs per CPU core of this host
FEWEST_MOST_THREADS = 32  # ... but never fewer than this (a small host still runs a GPU's feeding threads)


def most_threads() -> int:
    """The most threads one pool of tasks (a threaded scheduler's, a worker's) may run on this host."""
    return max(FEWEST_MOST_THREADS, THREADS_PER_CORE * (os.cpu_count() or 1))


def check_threads(count: int, what: str) -> None:
    """A thread count above what this host can serve is one line (``what``: where the count came from)."""
    most = most_threads()
    if count > most:
        raise LineError(
            f"{what} {count}: this machine runs at most {most} threads in one pool ({os.cpu_count() or 1} CPU "
            f"cores, {THREADS_PER_CORE} threads each, at least {FEWEST_MOST_THREADS}); give at most {most}"
        )


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


MOST_SECONDS = 24 * 3600.0  # the longest timeout a magic takes: a day


def timeout_seconds(text: str) -> float:
    """``argparse`` type: a timeout in seconds, ``90``, or with a unit, ``90s``, ``5m``, ``2h``; above 0 and at
    most a day."""
    try:
        seconds = float(text)
    except ValueError:
        found = _DURATION.match(text)
        if found is None:
            raise argparse.ArgumentTypeError(
                f"expected seconds (90) or a number and a unit (90s, 5m, 2h), got {text!r}"
            ) from None
        seconds = float(found.group(1)) * _SECONDS[found.group(2).lower()]
    if not seconds > 0:
        raise argparse.ArgumentTypeError(f"expected a number above 0, got {text}")
    if not seconds <= MOST_SECONDS:
        raise argparse.ArgumentTypeError(f"expected a timeout of at most 24h (86400 s), got {text}")
    return seconds


_DURATION = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*(s|sec|m|min|h)\s*$", re.IGNORECASE)
_SECONDS = {"s": 1.0, "sec": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0}
DURATION_OFF = ("off", "none", "never", "0")


def duration(text: str) -> float:
    """``argparse`` type: seconds in ``"90s"``, ``"30m"`` or ``"2h"``, at least 1 s; ``0.0`` for ``"off"`` (or
    ``"0"``)."""
    if text.strip().lower() in DURATION_OFF:
        return 0.0
    if text.strip().startswith("-"):
        raise argparse.ArgumentTypeError(f"invalid duration {text!r}: it must be positive (90s, 30m, 2h) or off")
    found = _DURATION.match(text)
    if found is None:
        raise argparse.ArgumentTypeError(f"invalid duration {text!r}: use a number and a unit (90s, 30m, 2h) or off")
    seconds = float(found.group(1)) * _SECONDS[found.group(2).lower()]
    if seconds < 1:
        raise argparse.ArgumentTypeError(f"invalid duration {text!r}: at least 1s, or off")
    return seconds


_WORD = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.,+-]{0,127}$")
_WALLTIME = re.compile(r"^(\d+-)?\d+(:\d{1,2}){0,2}$")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
_ADDRESS = re.compile(r"^(?P<scheme>[a-z]+)://(?P<host>\[[0-9a-fA-F:]+\]|[^\s:/\[\]]+):(?P<port>\d{1,5})/?$")
_SCHEMES = ("tcp", "tls", "ucx", "ucxx", "ws", "wss")
_GATEWAY_ADDRESS = re.compile(r"^https?://[^\s/:]+(:\d{1,5})?(/\S*)?$")
_OPTION_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]{0,127}$")


def parse_size(text: str) -> int | float:
    """Bytes with a unit (``"10GB"``, ``"512MiB"``) or a share of each device's memory (``"0.8"``)."""
    from dask.utils import parse_bytes

    try:
        value = float(text)
    except ValueError:
        value = None
    if value is not None:
        if 0 < value <= 1:
            return value
        raise argparse.ArgumentTypeError(
            f"invalid size {text!r}: a number without a unit is a share of each GPU's memory, from 0 to 1 "
            "(like 0.8); or give a size with a unit, like 10GB"
        )
    try:
        size = int(parse_bytes(text))
    except (ValueError, TypeError):
        raise argparse.ArgumentTypeError(f"invalid size {text!r}: use a unit, like 10GB or 512MiB") from None
    if size < 2**20:
        raise argparse.ArgumentTypeError(f"invalid size {text!r}: under 1 MiB; use a unit, like 10GB or 512MiB")
    return size


@dataclass(frozen=True)
class FreeGpus:
    """``--gpus free`` (``count`` 0: every free GPU) or ``--gpus free:N`` (the N freest)."""

    count: int = 0


def parse_gpus(text: str) -> tuple[int, ...] | FreeGpus | None:
    """``"all"`` (``None``), ``"free"`` or ``"free:N"`` (``FreeGpus``), or a comma list of distinct GPU indices
    such as ``"0,2,3"``."""
    if text.strip().lower() == "all":
        return None
    word, colon, count = text.strip().lower().partition(":")
    if word == "free":
        if not colon:
            return FreeGpus()
        if not count.isdigit() or int(count) < 1:
            raise argparse.ArgumentTypeError(f"invalid GPU choice {text!r}: use free, or free:N with N at least 1")
        return FreeGpus(int(count))
    parts = comma_list(text, "GPU indices")
    if any(not part.isdigit() for part in parts):
        raise argparse.ArgumentTypeError(f"invalid GPU list {text!r}: use all, free, free:N or indices like 0,2,3")
    indices = tuple(int(part) for part in parts)
    if len(set(indices)) != len(indices):
        raise argparse.ArgumentTypeError(f"invalid GPU list {text!r}: an index is named twice")
    return indices


def parse_address(text: str) -> str:
    """A scheduler address; ``host:port`` means ``tcp://host:port``."""
    address = text if "://" in text else f"tcp://{text}"
    match = _ADDRESS.match(address)
    if match is None or match.group("scheme") not in _SCHEMES or not 0 < int(match.group("port")) < 65536:
        raise argparse.ArgumentTypeError(f"invalid scheduler address {text!r}: use host:port, e.g. 10.0.0.5:8786")
    return address.rstrip("/")


def name_word(text: str) -> str:
    if not _NAME.match(text):
        raise argparse.ArgumentTypeError(f"invalid name {text!r}: use letters, digits, '.', '_' or '-'")
    return text


def identifier(text: str) -> str:
    if not text.isidentifier() or keyword.iskeyword(text):
        raise argparse.ArgumentTypeError(f"invalid variable name {text!r}")
    return text


def variable_name(text: str) -> str:
    """A new variable of the notebook's (``--client NAME``, ``-o NAME``): a Python name that is neither a keyword
    nor a built-in one would hide (``print``)."""
    if not text.isidentifier():
        raise argparse.ArgumentTypeError(
            f"invalid variable name {text!r}: it is not a valid Python name (letters, digits and _, not starting "
            "with a digit)"
        )
    if keyword.iskeyword(text):
        raise argparse.ArgumentTypeError(f"invalid variable name {text!r}: it is a Python keyword; choose another")
    if text in vars(builtins):
        raise argparse.ArgumentTypeError(
            f"invalid variable name {text!r}: it would hide Python's built-in {text}; choose another"
        )
    return text


def one_word(what: str) -> Callable[[str], str]:
    def parse(text: str) -> str:
        if not _WORD.match(text):
            raise argparse.ArgumentTypeError(f"invalid {what} {text!r}: one word of letters, digits, '.', '_' or '-'")
        return text

    return parse


def walltime(text: str) -> str:
    """A SLURM time limit: minutes, or [days-]hours:minutes[:seconds]."""
    if not _WALLTIME.match(text):
        raise argparse.ArgumentTypeError(f"invalid walltime {text!r}: use hours:minutes:seconds, like 01:30:00")
    return text


def job_option(text: str) -> str:
    """One batch directive, like ``--constraint=a100`` or ``-C a100``."""
    option = text.strip()
    if not option.startswith("-") or "\n" in option:
        raise argparse.ArgumentTypeError(
            f"invalid job option {text!r}: one directive as sbatch takes it, like --job-option='--constraint=a100'"
        )
    return option


def gateway_address(text: str) -> str:
    """A Dask Gateway's address, as its users are given it: ``http(s)://host[:port][/prefix]`` ("": none given,
    dask-gateway's config says)."""
    if text and not _GATEWAY_ADDRESS.match(text):
        raise argparse.ArgumentTypeError(
            f"invalid gateway address {text!r}: use the gateway's URL, like http://gateway.example.org:8000"
        )
    return text.rstrip("/")


def gateway_option(text: str) -> tuple[str, str]:
    """``KEY=VALUE``: one of the gateway's cluster options; the gateway says which keys and values it takes."""
    key, equals, value = text.partition("=")
    if not equals or not _OPTION_KEY.match(key.strip()):
        raise argparse.ArgumentTypeError(
            f"invalid gateway option {text!r}: use KEY=VALUE, like --gateway-option worker_cores=4"
        )
    return key.strip(), value.strip()


def memory_size(text: str) -> str:
    from dask.utils import parse_bytes

    try:
        parse_bytes(text)
    except (ValueError, TypeError):
        raise argparse.ArgumentTypeError(f"invalid memory {text!r}: use a unit, like 32GB") from None
    return text


def gateway_cluster_name(text: str) -> str:
    """A gateway cluster's name, as ``--gateway --list`` shows it (``namespace.3f2a...``)."""
    if not _NAME.match(text.replace("+", "")):
        raise argparse.ArgumentTypeError(
            f"invalid gateway cluster name {text!r}: give a name that %gpucluster --gateway --list shows"
        )
    return text
