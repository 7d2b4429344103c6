"""The components' `args`, checked as strictly as the stack file: an unknown, renamed, missing or mistyped
key is a ConfigError naming it (`RetryableQueue(billing).protect: unknown key …`), raised before anything
is registered. A silently ignored key would be worse than an error: `{"protect": True}` would leave every
queue unprotected."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import pulumi

from ..model.problems import ConfigError


@dataclass(frozen=True)
class Option:
    key: str
    check: Callable[[object], str | None]
    """What is wrong with a value, or None when it is fine."""
    missing: str | None = None
    """Set for a required key: what to pass, said when it is missing."""


RENAMED = {"retain_error_queue": "retain_error_queues"}
"""Old option names, refused with their new name."""


def boolean(value: object) -> str | None:
    return None if isinstance(value, bool) else f"expected true or false, got {value!r}"


def non_empty_string(value: object) -> str | None:
    return None if isinstance(value, str) and value else f"expected a non-empty string, got {value!r}"


def input_string(value: object) -> str | None:
    """A `pulumi.Input[str]`: a non-empty string, an Output or an awaitable (checked when it resolves)."""
    if isinstance(value, str):
        return None if value else "empty; name the vhost"
    if isinstance(value, pulumi.Output) or inspect.isawaitable(value):
        return None
    return f"expected a string or a pulumi Output, got {type(value).__name__}"


def mapping_or(parsed: type, shape: str) -> Callable[[object], str | None]:
    """The parsed dataclass, or a mapping in the stack config's shape (checked by the config parser)."""

    def check(value: object) -> str | None:
        if isinstance(value, (parsed, Mapping)):
            return None
        return f"expected a mapping in the stack config's {shape} shape, got {type(value).__name__}"

    return check


def passwords(value: object) -> str | None:
    """A mapping of user to password, or an Output of one: from another language, a map holding a secret arrives
    as one secret Output of the whole map (the SDK lifts a nested secret to the map)."""
    if isinstance(value, pulumi.Output):
        return None
    if not isinstance(value, Mapping):
        return f"expected a mapping of application user to password, got {type(value).__name__}"
    wrong = sorted(repr(user) for user, password in value.items()
                   if not isinstance(user, str) or input_string(password) is not None)
    if wrong:
        return f"users {', '.join(wrong)}: each password must be a non-empty string or a pulumi Output (a secret)"
    return None


PROTECT_QUEUES = Option("protect_queues", boolean)
RETAIN_ERROR_QUEUES = Option("retain_error_queues", boolean)


def check_args(component: str, args: object, options: tuple[Option, ...]) -> Mapping[str, Any]:
    """`args` when every key is known, present if required and of the right type; else a ConfigError
    listing every problem, at paths `component.key`."""
    if not isinstance(args, Mapping):
        raise ConfigError([(component, f"args must be a mapping of {', '.join(o.key for o in options)}; "
                                       f"got {type(args).__name__}")])
    known = {option.key: option for option in options}
    problems = []
    for key, value in args.items():
        if key in RENAMED and RENAMED[key] in known:
            problems.append((f"{component}.{key}", f"renamed to {RENAMED[key]}"))
        elif key not in known:
            problems.append((f"{component}.{key}", f"unknown key (allowed: {', '.join(sorted(known))})"))
        elif wrong := known[key].check(value):
            problems.append((f"{component}.{key}", wrong))
    for option in options:
        if option.missing is not None and option.key not in args:
            problems.append((f"{component}.{option.key}", f"missing; {option.missing}"))
    if problems:
        raise ConfigError(problems)
    return args


def instance_of(kind: type, what: str) -> Callable[[object], str | None]:
    """An object of `kind` (a plan, a component), described as `what` when it is not."""

    def check(value: object) -> str | None:
        return None if isinstance(value, kind) else f"expected {what}, got {type(value).__name__}"

    return check
