"""Parsing every strategy's `retry` block shares: its error queue's keys and the positive delays."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..config.fields import INVALID, Invalid, Problems, duration, integer, optional


def parse_error_queue(p: Problems, path: str, data: Mapping[str, Any]) -> tuple[int | Invalid | None,
                                                                              int | Invalid | None]:
    """`error_retention` and `error_max_length`, which every strategy takes."""
    retention = optional(data, "error_retention", lambda v: duration(p, f"{path}.error_retention", v), None)
    error_max_length = optional(data, "error_max_length", lambda v: integer(p, f"{path}.error_max_length", v, 1),
                                None)
    return retention, error_max_length


def positive_duration(p: Problems, path: str, value: object) -> int | Invalid:
    """A delay RabbitMQ takes as `delayed-retry-min`/`-max`: a whole, positive number of milliseconds."""
    parsed = duration(p, path, value)
    if parsed is not INVALID and parsed < 1:
        p.add(path, f"{value!r} is not positive; RabbitMQ needs at least 1ms")
        return INVALID
    return parsed
