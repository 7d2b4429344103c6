"""Identical changes as one row: sibling resources of many retryable queues (`*.wait.3 of every retryable
queue in vhost shop`), risky rows with every name, safe ones with the first few."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

from tools.lib import markdown
from tools.lib.inventory import natural
from tools.lib.planned import QueueKey
from tools.lib.review.rows import RETRYABLE, Model, Row
from tools.lib.risk import (
    MUST_SEE,
    SAFE,
)

NAMES_SHOWN = 10
"""Names a group of safe changes lists before `and N more`; a group of risky ones lists every name."""
PLURALS = {"Policy": "policies", "OperatorPolicy": "operator policies", "VHost": "vhosts",
           "Permissions": "permissions", "TopicPermissions": "topic permissions"}


def listed(names: Sequence[str], limit: int | None) -> str:
    shown = names if limit is None else names[:limit]
    more = len(names) - len(shown)
    return ", ".join(markdown.code(n) for n in shown) + (f" and {more:,} more" if more else "")


def _starred(row: Row) -> bool:
    """The row's role writes its retryable queue's name as `*` (`*.wait.1`), not as "the queue"."""
    return row.family is not None and row.role not in ("*", row.physical)


def _every_name(rows: Sequence[Row]) -> tuple[str, bool]:
    """Every name of a group of risky rows, compactly: the resources of retryable queues by role, once for
    all the queues that share them (`` `*`, `*.wait.1` of 1,000 retryable queues: `q0000`, … ``), then the rest;
    and whether a role is written with `*`."""
    starred = {r.role for r in rows if _starred(r)}
    stars = False
    roles: dict[QueueKey, set[str]] = {}
    physical: dict[QueueKey, list[str]] = {}
    for r in rows:
        if r.family is not None:
            roles.setdefault(r.family, set()).add(r.role)
            physical.setdefault(r.family, []).append(r.physical)
    alike: dict[tuple[str, ...], list[QueueKey]] = {}
    for family, own in roles.items():
        alike.setdefault(tuple(sorted(own)), []).append(family)
    parts = []
    for shared, families in sorted(alike.items()):
        if len(families) == 1:  # one retryable queue: its objects' own names say it best
            parts.append(listed(sorted(physical[families[0]], key=natural), None))
            continue
        what = ", ".join("the queue" if role == "*" else markdown.code(role) for role in shared)
        stars = stars or bool(starred & set(shared))
        parts.append(f"{what} of {len(families):,} retryable queues: {listed(sorted(f[1] for f in families), None)}")
    rest = sorted(r.physical for r in rows if r.family is None)
    return "; ".join([*parts, *([listed(rest, None)] if rest else [])]), stars


def _described(m: Model, rows: Sequence[Row]) -> tuple[str, bool]:
    """What a group of safe rows covers: `*.wait.3 of every retryable queue in vhost shop`, or names; and whether
    its role is written with `*`."""
    first = rows[0]
    vhost = markdown.code(first.vhost)
    if first.family is not None and all(r.family is not None for r in rows):
        queues = sorted({r.family[1] for r in rows if r.family})
        every = (m.families_before if first.op == "delete" else m.families).get(first.vhost, set())
        # `*` is the retryable queue itself: "2 retryable queues: a, b", not "`*` of 2 retryable queues".
        role = "" if first.role == "*" else f"{markdown.code(first.role)} of "
        if {r.family for r in rows} == every and len(queues) > 1:
            return f"{role}every retryable queue in vhost {vhost}", _starred(first)
        if len(queues) > 1:
            return (f"{role}{len(queues):,} retryable queues in vhost {vhost}: " + listed(queues, NAMES_SHOWN),
                    _starred(first))
    return f"in vhost {vhost}: " + listed(sorted((r.physical for r in rows), key=natural), NAMES_SHOWN), False


def _group_key(r: Row) -> tuple[Any, ...]:
    """Risky rows group by change alone (their names are all listed); safe ones by role too."""
    return (r.order()[:2], r.type, r.vhost, r.what_alike, r.notes, None if r.risk in MUST_SEE else r.role)


class Line(NamedTuple):
    """One line of the comment: a row of the changes table, or a retry contract change."""

    text: str
    stars: bool
    """It writes a retryable queue's name as `*` (`*.wait.3`), which the comment's note then explains."""


def grouped_rows(m: Model, rows: Sequence[Row]) -> list[Line]:
    groups: dict[tuple[Any, ...], list[Row]] = {}
    for r in rows:
        groups.setdefault(_group_key(r), []).append(r)
    lines = []
    for group in groups.values():
        if len(group) == 1:
            lines.append(Line(markdown.row(group[0].cells()), False))
            continue
        first = group[0]
        label = f"**{first.risk}**" if first.risk != SAFE else SAFE
        kind = "retryable queues" if first.type == RETRYABLE else PLURALS.get(
            first.type, first.type.lower() + ("es" if first.type.endswith("x") else "s"))
        names, stars = _every_name(group) if first.risk in MUST_SEE else _described(m, group)
        if first.risk in MUST_SEE:
            names = f"in vhost {markdown.code(first.vhost)}: " + names
        lines.append(Line(markdown.row([first.op, first.type, f"{len(group):,} {kind}", names, first.what_alike,
                                        label + first.notes]), stars or first.alike_relative))
    return lines
