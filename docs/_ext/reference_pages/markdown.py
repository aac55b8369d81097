"""Markdown pieces for the generated pages."""

from __future__ import annotations

from collections.abc import Iterable, Sequence


def code(text: object) -> str:
    """Inline code that holds any text (a longer fence where the text has backticks)."""
    value = str(text)
    fence = "``" if "`" in value else "`"
    pad = " " if value.startswith("`") or value.endswith("`") else ""
    return f"{fence}{pad}{value}{pad}{fence}"


def cell(text: str) -> str:
    """Text for a table cell: one line, pipes escaped."""
    return " ".join(text.split()).replace("|", "\\|")


def table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(cell(value) for value in row) + " |" for row in rows]
    return "\n".join(lines)


def block(text: str, language: str = "text") -> str:
    """A fenced block that holds ``text`` as it is."""
    fence = "````" if "```" in text else "```"
    return f"{fence}{language}\n{text.rstrip()}\n{fence}"


HEADER = "% Written from the code by docs/_ext/reference_pages when the site builds: edit the code, not this page.\n\n"
