"""The problem collector and the validators of single fields.

A validator reports what is wrong with a value and returns `INVALID`, so that a refused value is never
mistaken for an optional key left out (`ABSENT`) nor for a value that may legitimately be null.
"""

from __future__ import annotations

import difflib
import enum
import json
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from . import naming
from .durations import DurationError, parse_duration
from .problems import ConfigError

T = TypeVar("T")
D = TypeVar("D")


class Absent(enum.Enum):
    """A key that is not in its mapping."""

    ABSENT = "absent"


class Invalid(enum.Enum):
    """A value that was refused; its problem is already reported."""

    INVALID = "invalid"


ABSENT = Absent.ABSENT
INVALID = Invalid.INVALID


class Problems:
    """Collects every problem so that one run reports them all."""

    def __init__(self) -> None:
        self.items: list[tuple[str, str]] = []

    def add(self, path: str, message: str) -> None:
        self.items.append((path, message))

    def raise_if_any(self) -> None:
        if self.items:
            raise ConfigError(self.items)


def describe(value: object) -> str:
    return "null" if value is None else type(value).__name__


def child(path: str, key: object) -> str:
    return f"{path}.{key}" if path else str(key)


def did_you_mean(value: object, known: Sequence[str], prefix: str = "") -> str:
    """` did you mean "x"?` for the closest of `known` to a misspelt `value`, or "" when none is close; `prefix`
    goes before the suggestion (a config namespace, not compared: every key shares it)."""
    close = difflib.get_close_matches(str(value), list(known), n=1, cutoff=0.6) if isinstance(value, str) else []
    return f' did you mean "{prefix}{close[0]}"?' if close else ""


def mapping(p: Problems, path: str, value: object, allowed: Sequence[str],
            prefix: str = "") -> Mapping[str, Any] | Invalid:
    """`value` when it is a mapping, each key it holds outside `allowed` reported with the allowed one it may stand for.
    `prefix`: the keys' config namespace, with which the stack file writes them (`rabbitmq-retry:vhsts`)."""
    if not isinstance(value, Mapping):
        p.add(path, f"expected a mapping, got {describe(value)}")
        return INVALID
    for key in value:
        if key not in allowed:
            guess = did_you_mean(key, allowed, prefix)
            p.add(child(path, f"{prefix}{key}"), f"unknown key{';' + guess if guess else ''} (allowed: "
                  f"{', '.join(prefix + name for name in allowed)})")
    return value


def items(p: Problems, path: str, value: object, scalars: bool = False) -> Sequence[Any]:
    """The entries of an optional list: none when the key is absent or null. `scalars`: a list of names or
    durations, whose entry written alone (`delays: 2s`) is shown as the list it stands for (`delays: [2s]`)."""
    if value is ABSENT or value is None:
        return ()
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        fix = (f"; write {path.rsplit('.', 1)[-1]}: [{_flow_entry(value)}]"
               if scalars and isinstance(value, (str, int, float)) and not isinstance(value, bool) else "")
        p.add(path, f"expected a list, got {describe(value)}{fix}")
        return ()
    return value


def _flow_entry(value: str | int | float) -> str:
    """`value` as written inside `[…]` in YAML: plain when it reads back as itself (commas then separate entries, as
    in `1s, 10s`), else quoted."""
    if not isinstance(value, str):
        return json.dumps(value)
    return value if re.fullmatch(r"[\w.\-/]+(, ?[\w.\-/]+)*", value) else json.dumps(value)


def optional(data: Mapping[str, Any], key: str, parse: Callable[[object], T | Invalid], default: D) -> T | D | Invalid:
    """`default` when `key` is absent, else what `parse` makes of its value."""
    return parse(data[key]) if key in data else default


def integer(p: Problems, path: str, value: object, minimum: int, maximum: int | None = None) -> int | Invalid:
    if isinstance(value, bool) or not isinstance(value, int):
        p.add(path, f"expected an integer, got {value!r}")
        return INVALID
    if value < minimum or (maximum is not None and value > maximum):
        bound = f"{minimum} … {maximum}" if maximum is not None else f">= {minimum}"
        p.add(path, f"{value} is out of range (use {bound})")
        return INVALID
    return value


def number(p: Problems, path: str, value: object, minimum: float, below: float | None = None) -> float | Invalid:
    """An integer or a decimal, at least `minimum` and, when given, less than `below`."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
        p.add(path, f"expected a number, got {value!r}")
        return INVALID
    if value < minimum or (below is not None and value >= below):
        bound = f"{minimum} ≤ value < {below}" if below is not None else f">= {minimum}"
        p.add(path, f"{value} is out of range (use {bound})")
        return INVALID
    return float(value)


def boolean(p: Problems, path: str, value: object) -> bool | Invalid:
    if not isinstance(value, bool):
        p.add(path, f"expected true or false, got {value!r}")
        return INVALID
    return value


def choice(p: Problems, path: str, value: object, choices: Sequence[str]) -> str | Invalid:
    if value not in choices:
        guess = did_you_mean(value, choices)
        p.add(path, f"{value!r} is not one of {', '.join(choices)}{';' + guess if guess else ''}")
        return INVALID
    return str(value)


def entity_name(p: Problems, path: str, value: object, kind: str, allow_reserved: bool = False) -> str | Invalid:
    """A queue, exchange, policy or user name the provider can manage: it builds IDs as `name@vhost`
    and binding IDs with `/`."""
    if not isinstance(value, str) or not value.strip():
        p.add(path, f"{kind} name must be a non-empty string, got {value!r}")
        return INVALID
    refusals = [message for refused, message in (
        ("@" in value, f'"{value}": "@" breaks the provider\'s name@vhost IDs; rename the {kind}'),
        ("/" in value, f'"{value}": "/" breaks the provider\'s binding IDs; rename the {kind}'),
        (not allow_reserved and value.startswith(naming.RESERVED_PREFIX),
         f'"{value}": the "amq." prefix is reserved by RabbitMQ; rename the {kind}'),
        (not allow_reserved and value.startswith(f"{naming.DELAY_PREFIX}."),
         f'"{value}": the "{naming.DELAY_PREFIX}." prefix names the shared delay levels of strategy levels; rename '
         f"the {kind}"),
        (value != value.strip(), f'"{value}": leading or trailing whitespace; remove it'),
        (naming.byte_length(value) > naming.MAX_NAME_BYTES,
         f"{kind} name is {naming.byte_length(value)} bytes; RabbitMQ allows 255")) if refused]
    for message in refusals:
        p.add(path, message)
    return INVALID if refusals else value


def written_name(value: object) -> str | None:
    """A name as written, valid or not: references to it are not reported as undeclared."""
    return value if isinstance(value, str) else None


def duration(p: Problems, path: str, value: object) -> int | Invalid:
    try:
        return parse_duration(value)
    except DurationError as error:
        p.add(path, str(error))
        return INVALID


def regex(p: Problems, path: str, value: object) -> str | Invalid:
    if not isinstance(value, str):
        p.add(path, f"expected a regular expression string, got {value!r}")
        return INVALID
    try:
        re.compile(value)
    except re.error as error:
        p.add(path, f"{value!r} is not a valid regular expression ({error})")
        return INVALID
    return value
