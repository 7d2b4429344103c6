"""Markdown that stays intact whatever a name contains: queue, exchange and user names come from the
stack config, which accepts `|`, backticks and quotes."""

from __future__ import annotations

import re
from collections.abc import Iterable


def cell(text: str) -> str:
    """Text for one cell of a GitHub table: a `|` would start a new column, a newline end the row.
    GitHub honours `\\|` inside code spans too."""
    return text.replace("|", "\\|").replace("\r", " ").replace("\n", " ")


MARKUP = re.compile(r"([\\`*_\[\]<>&~])")


def text(plain: str) -> str:
    """`plain` shown as it is: the characters that would start markup (emphasis, links, HTML, code,
    entities) are backslash-escaped."""
    return MARKUP.sub(r"\\\1", plain)


def row(cells: Iterable[str]) -> str:
    return "| " + " | ".join(cell(c) for c in cells) + " |"


def code(text: str) -> str:
    """`text` as an inline code span, with a fence longer than any run of backticks inside it ("" stays "")."""
    if not text:
        return ""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * (longest + 1)
    padding = " " if text.startswith("`") or text.endswith("`") or not text.strip(" ") else ""
    return f"{fence}{padding}{text}{padding}{fence}"


def names(items: Iterable[str]) -> str:
    """Names in a message, each a code span: unambiguous whatever a name contains (`, `, spaces, backquotes); the
    empty name (the default exchange) as `""`."""
    return ", ".join(code(n) if n else '`""`' for n in items)
