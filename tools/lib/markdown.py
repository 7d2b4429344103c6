"""Markdown that stays intact whatever a name contains: queue, exchange and user names come from the
stack config, which accepts `|`, backticks and quotes."""

from __future__ import annotations

import re
from collections.abc import Iterable

from components.model.names import code, names

__all__ = ["cell", "code", "names", "row", "text"]


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
