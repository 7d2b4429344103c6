"""What the adoption tests compare of a `make adopt` run (tests/test_adopt.py, tests/broker/test_adoption.py)."""

from __future__ import annotations

from collections.abc import Iterable

from tools.lib.adopt import Decision


def summary(decisions: Iterable[Decision]) -> dict[str, list[tuple[str, str]]]:
    """(type, name) of every decision, by action."""
    out: dict[str, list[tuple[str, str]]] = {}
    for d in decisions:
        out.setdefault(d.action, []).append((d.type, d.name))
    return out
