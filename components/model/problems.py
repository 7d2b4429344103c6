"""What a check finds, as data: where, what (a stable code) and the sentence a person reads; and the two errors
that refuse a run, as plain exceptions (`pulumi/boundary.py` makes them the `pulumi.RunError` Pulumi prints
without a traceback, at the components' and the program's edge).

Pure. The preview-time checks (`checks.py`, each strategy's `path_problems`) return `Problem`s; `pulumi preview`
prints their messages, and the tools (`make adopt`) act on their path and code, never on the message, which is
free to change wording.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Problem:
    path: str
    """The config key path of the entry it is about (a policy, a queue's key), "" when it is about no one entry."""
    code: str
    """What kind of problem it is: a stable identifier, one per sentence (`checks.py` lists them)."""
    message: str
    """What is wrong and what to do, as printed: one line, naming the key path or the object."""

    def __str__(self) -> str:
        return self.message


class ConfigError(Exception):
    """Invalid stack config. `problems` holds (key path, what is wrong and what to do)."""

    def __init__(self, problems: Sequence[tuple[str, str]]) -> None:
        self.problems = list(problems)
        lines = "\n".join(f"  {path}: {message}" for path, message in self.problems)
        count = len(self.problems)
        super().__init__(f"invalid rabbitmq-retry config ({count} problem{'s' * (count != 1)}):\n{lines}")


class TopologyError(Exception):
    """The planned topology would lose or misroute messages; `problems` says where and why."""

    def __init__(self, scope: str, problems: list[Problem]) -> None:
        """`scope`: what was checked, e.g. 'vhost "shop"' or "the stack"."""
        self.problems = problems
        lines = "\n".join(f"  {problem.message}" for problem in problems)
        super().__init__(f"{scope}: the planned topology would lose or misroute messages:\n{lines}")
