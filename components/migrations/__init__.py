"""The kinds of `migrations[]` entry, by name: one module each, all implementing `base.MigrationKind`.

A new kind is a module here, listed in `KINDS`; nothing else in the project compares a migration's kind with a
name (docs/development.md: Adding a migration kind; `tests/test_migration_kinds.py` checks it). `plan_migrations`
applies a vhost's entries to its plan in config order, each by its kind's module.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol

from ..model.key_paths import with_paths
from ..model.plan_types import DelayLevelsPlan, Migrated, RetryablePlan, shovel_permissions
from ..model.stack_config import Vhost
from . import drain_levels, drain_tiers, move
from .base import Migrating, MigrationKind

KINDS: Mapping[str, MigrationKind] = {module.NAME: module for module in (move, drain_tiers, drain_levels)}
"""What a `migrations[]` entry does: `move` a queue's messages to a successor queue, or drain the wait tiers a
queue's `retry.delays` dropped (`drain_tiers`), or the delay levels a lower `delay_levels.max_delay` dropped
(`drain_levels`)."""


class OfKind(Protocol):
    @property
    def kind(self) -> str: ...


def kind_of(migration: OfKind) -> MigrationKind:
    """The module of a migration's kind: a config entry (`Migration`), or one as the tools read it."""
    return KINDS[migration.kind]


def plan_migrations(vhost: Vhost, path: str, retryables: tuple[RetryablePlan[Any], ...],
                    delay_levels: DelayLevelsPlan | None, imports: tuple[str, ...],
                    plan_retryable: Callable[..., RetryablePlan[Any]],
                    plan_levels: Callable[..., DelayLevelsPlan], shovel_user: str | None = None) -> Migrated:
    """Apply the vhost's migrations to its planned retryables and delay levels (planned from the current config);
    `plan_retryable` and `plan_levels` plan the old config's objects the same way. `shovel_user`: the stack's
    shovel user (`naming.shovel_user`), required when a migration moves a queue in step move."""
    migrating = Migrating(vhost, path, {r.config.name: r for r in retryables}, delay_levels, imports,
                          plan_retryable, plan_levels, shovel_user)
    plans = tuple(kind_of(m).plan(m, at, migrating) for at, m in with_paths(path, "migrations", vhost.migrations))
    return Migrated(tuple(migrating.retryables[r.config.name] for r in retryables), migrating.delay_levels, plans,
                    shovel_permissions([s for m in plans for s in m.shovels]))

