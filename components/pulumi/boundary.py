"""Where the pure layers' plain `ConfigError` and `TopologyError` become `pulumi.RunError`s: Pulumi prints a RunError
as its message alone (the plugin host fails a Construct with it), any other exception as "Program failed with an
unhandled exception" and a traceback. `reported` wraps the components' constructors, the program's steps and the
public loaders."""

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


def reported(function: F) -> F:
    """`function`, raising each plain `ConfigError` or `TopologyError` again as the same error (its problems, its
    message) of the class above that is also a `RunError`."""

    @functools.wraps(function)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return function(*args, **kwargs)
        except (problems.ConfigError, problems.TopologyError) as error:
            if isinstance(error, pulumi.RunError):
                raise
            kind = ConfigError if isinstance(error, problems.ConfigError) else TopologyError
            again = kind.__new__(kind)
            again.__dict__.update(error.__dict__)
            again.args = error.args
            raise again from None

    return cast(F, wrapper)
