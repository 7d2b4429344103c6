"""Durations as written in stack config: "500ms", "10s", "5m", "1h", "1d", "1m30s", in range for RabbitMQ.

The grammar is the client's (`rabbitmq_retry_client.durations`), so the stack file takes every duration
`rabbitmq-retry parked --older-than` takes; the client installs without this package, so it lives there."""

from __future__ import annotations

from rabbitmq_retry_client.durations import duration_ms
from rabbitmq_retry_client.durations import format_duration as format_duration  # one spelling everywhere

MIN_MS = 1
MAX_MS = 2**32 - 1
"""RabbitMQ's ceiling for a message TTL, in milliseconds."""

HINT = "use 500ms, 10s, 5m, 1h, 1d or 1m30s"


class DurationError(ValueError):
    """A value that is not a duration in range; the message says what to write instead."""


def parse_duration(text: object) -> int:
    """Milliseconds of a duration string, checked against 1 ms … 2^32-1 ms."""
    if isinstance(text, bool) or not isinstance(text, str):
        raise DurationError(f"{text!r} is not a duration ({HINT})")
    ms = duration_ms(text.strip())
    if ms is None:
        raise DurationError(f'"{text}" is not a duration ({HINT})')
    if not MIN_MS <= ms <= MAX_MS:
        shown = text if len(text) <= 20 else f"{text[:20]}…"
        raise DurationError(f'"{shown}" is out of range (1ms … {MAX_MS}ms, about 49 days)')
    return ms
