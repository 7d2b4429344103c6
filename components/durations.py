"""Durations as written in stack config: "500ms", "10s", "5m", "1h", "1d"."""

from __future__ import annotations

import re

MIN_MS = 1
MAX_MS = 2**32 - 1
"""RabbitMQ's ceiling for a message TTL, in milliseconds."""

UNIT_MS = {"ms": 1, "s": 1_000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
_DURATION = re.compile(r"([0-9]{1,13})(ms|s|m|h|d)")  # 13 digits cover 2^32-1 ms; more is out of range
HINT = "use 500ms, 10s, 5m, 1h, 1d"


class DurationError(ValueError):
    """A value that is not a duration in range; the message says what to write instead."""


def parse_duration(text: object) -> int:
    """Milliseconds of a duration string, checked against 1 ms … 2^32-1 ms."""
    if isinstance(text, bool) or not isinstance(text, str):
        raise DurationError(f"{text!r} is not a duration ({HINT})")
    if re.fullmatch(r"[0-9]{14,}(ms|s|m|h|d)", text.strip()):
        raise DurationError(f'"{text[:20]}…" is out of range (1ms … {MAX_MS}ms, about 49 days)')
    match = _DURATION.fullmatch(text.strip())
    if match is None:
        raise DurationError(f'"{text}" is not a duration ({HINT})')
    ms = int(match.group(1)) * UNIT_MS[match.group(2)]
    if not MIN_MS <= ms <= MAX_MS:
        raise DurationError(f'"{text}" is out of range (1ms … {MAX_MS}ms, about 49 days)')
    return ms


def format_duration(ms: int) -> str:
    """The shortest exact spelling of `ms`: 90000 → "90s", 3600000 → "1h"."""
    for unit in ("h", "m", "s"):
        if ms % UNIT_MS[unit] == 0:
            return f"{ms // UNIT_MS[unit]}{unit}"
    return f"{ms}ms"
