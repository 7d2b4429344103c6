"""What a check of the plan finds, as data: where, what (a stable code) and the sentence a person reads.

Pure. The preview-time checks (`checks.py`, each strategy's `path_problems`) return `Problem`s; `pulumi preview`
prints their messages, and the tools (`make adopt`) act on their path and code, never on the message, which is
free to change wording.
"""

from __future__ import annotations

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
