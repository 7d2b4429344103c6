"""`vhosts[].migrations[]`: the parser of each entry and the checks against the vhost's queues.

A migration is declared in the stack file, never inferred: the entry names what moves or drains, and its
`step` says which commit of the migration this is. Every problem names the key path and a fix. What differs
between kinds (the body's keys, its parser, its checks, what the plan makes of it) is its module's
(`components/migrations/`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from ..migrations import KINDS, kind_of
from ..migrations.base import CheckScope, MigrationKind
from ..model.config_entries import Entry, QueueEntry
from ..model.fields import INVALID, Invalid, Problems, choice, items, mapping
from ..model.key_paths import entry_paths
from ..model.keys import MIGRATION_KEYS
from ..model.stack_config import DelayLevels, Migration

MIGRATION_NAME = re.compile(r"[a-z0-9-]+")
"""A migration's name ends the shovels' names and shows in review and status: lower case, digits and dashes."""


def _kind(p: Problems, path: str, data: Mapping[str, Any]) -> MigrationKind | Invalid:
    written = [kind for kind in KINDS if kind in data]
    if len(written) != 1:
        found = f"found {', '.join(written)}" if written else "found none"
        p.add(path, f"exactly one of {', '.join(KINDS)} per migration ({found}); "
              "write one entry per change")
        return INVALID
    return KINDS[written[0]]


def parse_migration(p: Problems, path: str, index: int, raw: object) -> Migration | Invalid:
    """One entry's own fields; `check_migrations` checks it against the vhost."""
    data = mapping(p, path, raw, MIGRATION_KEYS)
    if data is INVALID:
        return INVALID
    name = data.get("name")
    if not isinstance(name, str) or not MIGRATION_NAME.fullmatch(name):
        p.add(f"{path}.name", f"{name!r}: every migration needs a name of lower-case letters, digits and dashes "
              "(e.g. billing-to-quorum); it names the migration's shovels and shows in review and status")
        name = INVALID
    kind = _kind(p, path, data)
    if isinstance(kind, Invalid):
        return INVALID
    steps = kind.STEPS
    if "step" not in data:
        p.add(f"{path}.step", f"missing; {' then '.join(steps)} (start with step: {steps[0]})")
        step: str | Invalid = INVALID
    else:
        step = choice(p, f"{path}.step", data["step"], steps)
    where = f"{path}.{kind.NAME}"
    body = mapping(p, where, data[kind.NAME], kind.KEYS)
    if body is INVALID or name is INVALID or step is INVALID:
        return INVALID
    return kind.parse(p, where, body, name, step, index)


def parse_migrations(p: Problems, path: str, raw: object, queues: Sequence[QueueEntry],
                     delay_levels: DelayLevels | Invalid | None,
                     exchanges: Sequence[Entry[Any]] = ()) -> tuple[Migration, ...] | Invalid:
    """`migrations:` of a vhost, each entry checked against the vhost's queues, exchanges and delay levels."""
    written = items(p, f"{path}.migrations", raw)
    paths = entry_paths(path, "migrations", written)
    entries = [parse_migration(p, at, i, item) for i, (at, item) in enumerate(zip(paths, written, strict=True))]
    migrations = tuple(m for m in entries if isinstance(m, Migration))
    before = len(p.items)
    check_migrations(p, path, migrations, queues, delay_levels, exchanges, paths)
    if len(migrations) != len(entries) or len(p.items) != before:
        return INVALID
    return migrations


def _check_names(p: Problems, migrations: Sequence[Migration], paths: Sequence[str]) -> None:
    first: dict[str, str] = {}
    for m in migrations:
        if m.name in first:
            p.add(f"{paths[m.index]}.name", f'"{m.name}" is also {first[m.name]}; give each migration its own name')
        first.setdefault(m.name, paths[m.index])


def check_migrations(p: Problems, path: str, migrations: Sequence[Migration], queues: Sequence[QueueEntry],
                     delay_levels: DelayLevels | Invalid | None, exchanges: Sequence[Entry[Any]],
                     paths: Sequence[str]) -> None:
    """Names unique; each entry against the vhost, by its kind (`check`), then against what the others do
    (`check_across`: a queue moves to one successor at a time, and not on to a third in the same step). `paths`:
    the key path of each entry as written, refused ones included."""
    _check_names(p, migrations, paths)
    vhost = CheckScope(path, queues, exchanges, delay_levels, {q.written: q for q in queues if q.written is not None},
                       paths)
    for m in migrations:
        kind_of(m).check(p, m, vhost)
    for m in migrations:
        kind_of(m).check_across(p, m, vhost)
