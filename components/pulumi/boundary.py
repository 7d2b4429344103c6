"""Where the pure layers' errors become `pulumi.RunError`, at the edge of every component and program step.

Pulumi prints a `RunError` as its message alone, and any other exception as "Program failed with an unhandled
exception" and its traceback; the plugin host likewise fails a Construct with a RunError's message. The layers
below raise plain `ConfigError`s and `TopologyError`s (`model/problems.py`) and import no Pulumi; `reported`
re-raises them here as the same error, with the same problems and message, that is also a `RunError`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar, cast

import pulumi

from ..model import problems

F = TypeVar("F", bound=Callable[..., Any])


class ConfigError(problems.ConfigError, pulumi.RunError):
    """A `ConfigError` as Pulumi reports it: the problems, no traceback."""


class TopologyError(problems.TopologyError, pulumi.RunError):
    """A `TopologyError` as Pulumi reports it: the problems, no traceback."""


def as_run_error(error: problems.ConfigError | problems.TopologyError) -> pulumi.RunError:
    """The same error (its problems, its message) as the `RunError` class of its kind."""
    kind = ConfigError if isinstance(error, problems.ConfigError) else TopologyError
    reported: pulumi.RunError = kind.__new__(kind)
    reported.__dict__.update(error.__dict__)
    reported.args = error.args
    return reported


def reported(function: F) -> F:
    """`function`, raising its `ConfigError`s and `TopologyError`s as `RunError`s (`as_run_error`)."""

    @functools.wraps(function)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return function(*args, **kwargs)
        except (problems.ConfigError, problems.TopologyError) as error:
            if isinstance(error, pulumi.RunError):
                raise
            raise as_run_error(error) from None

    return cast(F, wrapper)
