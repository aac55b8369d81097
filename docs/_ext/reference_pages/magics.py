"""Every magic, with its help as ``%name?`` prints it (its docstring, as text) and every option its parser takes:
what it takes, what it does and what applies where a line leaves it out, as the parser says."""

from __future__ import annotations

import argparse
import importlib
import inspect
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from reference_pages import helptext
from reference_pages.markdown import HEADER, code, table

# Each magic's parser, where it has one ("module:attribute", an ArgumentParser or a function that makes one).
# tests/test_docs_reference.py checks that every parser the package makes is named here.
PARSERS = {
    "gpucluster": "gpu_magics.cluster.options:_PARSER",
    "gpurun": "gpu_magics.gpurun.options:_PARSER",
    "gpumonitor": "gpu_magics.magics.gpumonitor:_parser",
    "gpumemory": "gpu_magics.magics.gpumemory:_parser",
}

# What an option's value is, by the name of the function that parses it (argparse's ``type``).
TAKES = {
    "parse_gpus": "`all`, `free`, `free:N` or GPU indices like `0,2,3`",
    "positive_int": "a whole number, at least 1",
    "non_negative_int": "a whole number, at least 0",
    "positive_float": "a number above 0",
    "non_negative_float": "a number, at least 0",
    "parse_address": "a scheduler address, `host:port` or `tcp://host:port`",
    "parse_size": "a size with a unit (`10GB`, `512MiB`) or a share of each GPU's memory (`0.8`)",
    "name_word": "a name of letters, digits, `.`, `_`, `-`",
    "identifier": "a Python variable name",
    "_identifier": "a Python variable name",
    "duration": "a duration (`90s`, `30m`, `2h`) or `off`",
    "parse": "one word of letters, digits, `.`, `_`, `-`",
    "walltime": "a SLURM time limit, `[days-]hours:minutes[:seconds]`",
    "job_option": "one sbatch directive, like `--constraint=a100`",
    "memory_size": "a size with a unit, like `64GB`",
    "gateway_address": "the gateway's URL, `http(s)://host[:port][/prefix]` (optional)",
    "gateway_option": "`KEY=VALUE`, one of the gateway's cluster options",
    "gateway_cluster_name": "a gateway cluster's name, as `--list` shows it",
    "_device": "a GPU index (`0`, `1`, ...) or `free`",
    "_shown_ranks": "the ranks whose output shows live, like `0` or `0,2`",
    "rank_spec": "ranks, like `0`, `0,2` or `1-3`",
    "_group_library": "`torch` or `jax`",
    "variable_name": "a new Python variable name (not a keyword or a built-in name such as `print`)",
    "timeout_seconds": "seconds (`90`) or a number and a unit (`90s`, `5m`, `2h`), above 0 and at most 24h",
    "spmd_timeout": "seconds or a number and a unit (`300`, `90s`, `5m`, `2h`), at most 24h; under 60, with its unit",
    "repeat_count": "a whole number from 1 to 1000",
    "interval_seconds": "seconds, from 0.1 to 60",
}


@dataclass(frozen=True)
class Magic:
    name: str
    kinds: tuple[str, ...]  # "line", "cell"
    help: str
    owner: type[Any]
    parser: argparse.ArgumentParser | None

    @property
    def spellings(self) -> list[str]:
        """How it is written: ``%name``, ``%%name`` or both."""
        return [("%%" if kind == "cell" else "%") + self.name for kind in self.kinds]

    @property
    def usage(self) -> str:
        return " / ".join(code(spelling) for spelling in self.spellings)


def magics() -> Iterator[Magic]:
    """The magics that ``%load_ext gpu_magics`` registers, in the order it registers them."""
    from gpu_magics.magics.extension import MAGICS_CLASSES

    for spec in MAGICS_CLASSES:
        module, _, attribute = spec.partition(":")
        owner = getattr(importlib.import_module(module), attribute)
        names: dict[str, list[str]] = {}
        for kind in ("line", "cell"):
            for name, method in owner.magics[kind].items():
                names.setdefault(name, []).append(kind)
                assert method == name, f"{owner.__name__}.{method} registers {name}"
        for name, kinds in names.items():
            yield Magic(name, tuple(kinds), inspect.getdoc(getattr(owner, name)) or "", owner, parser(name))


def parser(name: str) -> argparse.ArgumentParser | None:
    spec = PARSERS.get(name)
    if spec is None:
        return None
    module, _, attribute = spec.partition(":")
    found = getattr(importlib.import_module(module), attribute)
    return found if isinstance(found, argparse.ArgumentParser) else found()


def options(found: argparse.ArgumentParser) -> list[argparse.Action]:
    return [action for action in found._actions if action.option_strings]


def takes(action: argparse.Action) -> str:
    if isinstance(action, argparse.BooleanOptionalAction):
        return "nothing (a switch; the `--no-` form turns it off)"
    if action.nargs == 0:
        return "nothing (a switch)"
    if action.choices:
        return " or ".join(code(choice) for choice in action.choices)
    kind = getattr(action.type, "__name__", None)
    if kind is None:
        return "a word"
    words = TAKES.get(kind)
    if words is None:
        raise KeyError(f"docs/_ext/reference_pages/magics.py: TAKES has no words for the option type {kind!r}")
    repeat = "; repeatable" if isinstance(action, argparse._AppendAction) else ""
    optional = " (its value may be left out)" if action.nargs == "?" else ""
    return words + optional + repeat


def default(action: argparse.Action) -> str:
    """What applies where a line leaves the option out: the parser's default where it has one, else its words
    (``gpu_magics/text/option_help.py``)."""
    value = action.default
    if value is not None and value is not argparse.SUPPRESS and action.nargs != 0:
        return code(value)
    return said(action, "left_out")


def does(action: argparse.Action) -> str:
    """What the option does, as its parser's help says."""
    return said(action, "help").replace("%%", "%")


def said(action: argparse.Action, attribute: str) -> str:
    words = getattr(action, attribute, None)
    if not words:
        raise KeyError(
            f"{action.option_strings}: no {attribute} words; give them in gpu_magics/text/option_help.py "
            "(MagicArgumentParser.described)"
        )
    return str(words)


def _section(magic: Magic) -> str:
    parts = [f"(magic-{magic.name})=\n## {magic.usage}"]
    parts.append(f"What {code(('%%' if magic.kinds == ('cell',) else '%') + magic.name + '?')} prints:")
    parts.append(helptext.markdown(magic.help))
    if magic.parser is not None:
        rows = [(", ".join(code(flag) for flag in action.option_strings), does(action), takes(action), default(action))
                for action in options(magic.parser)]  # fmt: skip
        parts.append(f"Every option of {code(magic.parser.prog)}, as its parser takes it:")
        parts.append(table(("option", "what it does", "takes", "default"), rows))
    else:
        parts.append("It takes no options.")
    traits = magic.owner.class_traits(config=True)
    if traits:
        parts.append(
            f"Its settings ({code('%config ' + magic.owner.__name__ + '.<name> = value')}) are listed under "
            f"{{ref}}`{magic.owner.__name__} <settings-{magic.owner.__name__.lower()}>`."
        )
    return "\n\n".join(parts)


def page() -> str:
    found = list(magics())
    intro = (
        "# Magics\n\n"
        "`%load_ext gpu_magics` registers these magics. Each section shows the help that `%name?` prints in a "
        "notebook, then every option its parser takes: what it does, the values it takes, and what applies where "
        "a line leaves it out. A wrong option or value is refused in one line that names the valid ones.\n\n"
        + "\n".join(f"- {{ref}}`{' / '.join(magic.spellings)} <magic-{magic.name}>`" for magic in found)
    )
    return HEADER + intro + "\n\n" + "\n\n".join(_section(magic) for magic in found) + "\n"
