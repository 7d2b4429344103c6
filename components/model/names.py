"""Names in messages, unambiguous whatever a name contains: queue, exchange and user names come from the stack
config or a broker, which accept `, `, spaces, quotes and backquotes (EasyNetQ's queue names hold `, `)."""

from __future__ import annotations

import re
from collections.abc import Iterable


def code(text: str) -> str:
    """`text` as an inline code span, with a fence longer than any run of backticks inside it ("" stays "")."""
    if not text:
        return ""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * (longest + 1)
    padding = " " if text.startswith("`") or text.endswith("`") or not text.strip(" ") else ""
    return f"{fence}{padding}{text}{padding}{fence}"


def names(items: Iterable[str]) -> str:
    """Names in a message, each a code span; the empty name (the default exchange) as `""`."""
    return ", ".join(code(n) if n else '`""`' for n in items)
