"""A magic's help (its docstring, as ``%name?`` prints it) as Markdown: its paragraphs as text, its usage lines and
option lines (``COMMAND   what it does``) as lists, ````code```` as code; no block to scroll, no markup shown.

The help's conventions: paragraphs; ``Heading::`` or ``Heading:`` followed by indented lines, each a command or an
option, then two or more spaces and what it does (deeper lines go on with the one before); ``- item`` lists whose
lines go on indented.
"""

from __future__ import annotations

import re

_COLUMNS = re.compile(r"\S( {2,})\S")  # where a line's command ends and what it does begins
_ITEM = re.compile(r"^- (``[^`]+``|\S+)( +)(.*)$")


def inline(text: str) -> str:
    """Prose as one Markdown line: ````x```` as ```x```, runs of spaces as one, a leading ``%`` not a comment."""
    line = " ".join(text.split()).replace("``", "`")
    return "\\" + line if line.startswith("%") else line


def code(text: str) -> str:
    """A command as inline code, on one line."""
    text = " ".join(text.split())
    fence = "``" if "`" in text else "`"
    return f"{fence}{text}{fence}"


def _entry_lines(lines: list[str]) -> list[str]:
    """The indented lines of a block as a list: each command, and what it does where the line says it."""
    out = []
    indent = min(len(line) - len(line.lstrip()) for line in lines)
    entries: list[tuple[str, list[str]]] = []
    for line in lines:
        depth = len(line) - len(line.lstrip())
        text = line.strip()
        if depth > indent and entries:  # it goes on with the entry before: its words, or its command
            command, said = entries[-1]
            if said:
                said.append(text)
            else:
                entries[-1] = (f"{command} {text}", said)
            continue
        split = _COLUMNS.search(text)
        entries.append((text, []) if split is None else (text[: split.start(1)], [text[split.end(1) :]]))
    for command, said in entries:
        words = inline(" ".join(said))
        out.append(f"- {code(command)}" + (f": {words}" if words else ""))
    return out


def _list_items(lines: list[str]) -> list[str]:
    """``- item`` lines, each with the indented lines that go on with it."""
    items: list[list[str]] = []
    for line in lines:
        if line.startswith("- "):
            items.append([line])
        else:
            items[-1].append(line.strip())
    out = []
    for item in items:
        first = _ITEM.match(item[0])
        text = " ".join([item[0][2:], *item[1:]])
        if first is not None and len(first.group(2)) >= 2:  # "- ``term``   what it is"
            text = first.group(1) + ": " + " ".join([first.group(3), *item[1:]])
        out.append("- " + inline(text))
    return out


def markdown(help_text: str) -> str:
    """The help as Markdown."""
    blocks: list[str] = []
    lines = help_text.rstrip().splitlines()
    index = 0
    while index < len(lines):
        if not lines[index].strip():
            index += 1
            continue
        if lines[index].startswith("- "):  # a list, to the next blank line
            end = index
            while end < len(lines) and lines[end].strip():
                end += 1
            blocks.append("\n".join(_list_items(lines[index:end])))
            index = end
            continue
        if lines[index].startswith(" "):  # indented lines: a usage or option block (blank lines may part it)
            end = index
            while end < len(lines) and (lines[end].startswith(" ") or not lines[end].strip()):
                end += 1
            block = [line for line in lines[index:end] if line.strip()]
            blocks.append("\n".join(_entry_lines(block)))
            index = end
            continue
        end = index  # a paragraph: to a blank line, an indented line or a list
        while end < len(lines) and lines[end].strip() and not lines[end].startswith((" ", "- ")):
            end += 1
        text = " ".join(lines[index:end])
        if text.endswith("::"):
            text = text[:-1]
        blocks.append(inline(text))
        index = end
    return "\n\n".join(blocks)
