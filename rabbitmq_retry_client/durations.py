"""Durations as people write them, in one grammar for the stack config and for `rabbitmq-retry`: a whole
number and a unit (`500ms`, `90s`, `15m`, `2h`, `7d`), or several, largest unit first, each unit once
(`1m30s`, `1h30m`, `1s500ms`). Pure; the stack config adds its own range (`components/model/durations.py`)."""

from __future__ import annotations

import itertools
import re

UNIT_MS = {"d": 86_400_000, "h": 3_600_000, "m": 60_000, "s": 1_000, "ms": 1}
"""Milliseconds of each unit, largest first: the order the parts of a duration are written in."""
_PART = re.compile(r"([0-9]+)(ms|d|h|m|s)")
_DIGITS = 30
"""More digits than any duration needs (and far fewer than Python refuses to convert): a longer number counts as
10^30 ms, beyond every range."""
_ORDER = list(UNIT_MS)


def duration_ms(text: str) -> int | None:
    """Milliseconds of `text`, or None when it is not a duration (a unit repeated or out of order, `30s1m`, is
    not one: it is more likely a typo than a sum)."""
    parts = _PART.findall(text)
    if not parts or "".join(number + unit for number, unit in parts) != text:
        return None
    ranks = [_ORDER.index(unit) for _, unit in parts]
    if any(later <= earlier for earlier, later in itertools.pairwise(ranks)):
        return None
    return sum((int(number) if len(number) <= _DIGITS else 10**_DIGITS) * UNIT_MS[unit] for number, unit in parts)


def format_duration(ms: object) -> str:
    """The shortest exact spelling of `ms` in this grammar, as messages show a duration: 90000 → "90s", 7200000 →
    "2h", 1500 → "1500ms". What is not a whole number of milliseconds (a contract's value gone wrong) is shown as
    it is, with "ms"."""
    if isinstance(ms, bool) or not isinstance(ms, (int, float)) or ms != int(ms):
        return f"{ms}ms"
    whole = int(ms)
    for unit in ("h", "m", "s"):
        if whole % UNIT_MS[unit] == 0 and whole:
            return f"{whole // UNIT_MS[unit]}{unit}"
    return f"{whole}ms"
