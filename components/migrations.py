"""Migrations: the plan parts every kind of `migrations[]` entry shares. What each kind keeps, adds and retires
in a vhost's plan is its module's (`migration_kinds/`), applied in config order by `migration_kinds.plan_migrations`.

Pure and Pulumi-free. A migration never changes an entry the old config planned: what it keeps is the old
config's own plan, so its inputs stay byte-identical and nothing is replaced (docs/config.md: Migrations).
Shovels move messages from a queue to its successor; the stack's one shovel user connects them, with the least
permissions in each vhost that has one (`shovel_permissions`). Strategies know nothing of migrations.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from . import naming
from .config.model import Migration
from .entries import BindingPlan, DelayLevelsPlan, Grant, PermissionPlan, RetryablePlan

SHOVEL_ACK_MODE = "on-confirm"
"""The only lossless acknowledgement mode: the shovel acks a message at the source once the destination confirmed it."""
SHOVEL_DELETE_AFTER = "never"
"""The stack removes its shovels by config: `queue-length` counts only ready messages at (re)connect and a shovel
may delete itself before everything moved (rabbitmq-server#14636)."""
SHOVEL_WRITE = Grant(r"^amq\.default$", ("amq.default",))
"""A shovel with a destination queue publishes through the default exchange (RabbitMQ checks a publish to
`""` as one to `amq.default`)."""
DRAINS_BY = "shovel"
"""How the old queue of a move reaches its successor, as the contract says."""


@dataclass(frozen=True)
class ShovelPlan:
    """A dynamic shovel (`rabbitmq.Shovel`) from a queue to its successor, in one vhost."""

    key: str
    name: str
    source: str
    destination: str
    migration: str
    user: str
    """The stack's shovel user (`naming.shovel_user`), which it connects as."""
    ack_mode: str = SHOVEL_ACK_MODE
    source_delete_after: str = SHOVEL_DELETE_AFTER
    external_source: bool = False
    """The source queue is not the stack's (`move.external`): the shovel names it, and waits for no resource of it."""


@dataclass(frozen=True)
class MigrationPlan:
    """What one `migrations[]` entry does in this step, for the components, the checks, the review and status."""

    config: Migration
    path: str
    """Its config key path, e.g. "vhosts[shop].migrations[billing-to-quorum]"."""
    shovels: tuple[ShovelPlan, ...] = ()
    bindings: tuple[BindingPlan, ...] = ()
    """Step retire of a move with delay levels: the successor's delivery binding for the old queue's key."""
    old_queues: tuple[str, ...] = ()
    """The queues that drain and are retired: a move's old queue and everything it owns (in step retire, the
    ones still known: the queue and its error queue; wait tiers are found on the broker), or the tiers or levels a
    drain keeps out of the contract."""

    @property
    def name(self) -> str:
        return self.config.name


@dataclass(frozen=True)
class Migrated:
    """A vhost's plan parts after its migrations: retryables and delay levels with what drains kept, and what the
    migrations add."""

    retryables: tuple[RetryablePlan[Any], ...]
    delay_levels: DelayLevelsPlan | None
    migrations: tuple[MigrationPlan, ...]
    shovel_permissions: tuple[PermissionPlan, ...]
    """The shovel user's permissions in this vhost (none without a shovel)."""

    @property
    def bindings(self) -> tuple[BindingPlan, ...]:
        return tuple(b for m in self.migrations for b in m.bindings)


def shovel_permissions(shovels: Sequence[ShovelPlan]) -> tuple[PermissionPlan, ...]:
    """The shovel user's permissions in one vhost, the least both brokers need (measured on 3.10.8 and 4.3.6): read
    the queues it moves from; write only the default exchange it publishes through (not the destination queue);
    configure its destination queues, which it declares (4.3 refuses the shovel without; the source needs none).
    The logical key names no stack: a stack has one shovel user."""
    if not shovels:
        return ()
    return (PermissionPlan(key=naming.permissions_key(naming.SHOVEL_USER), user=shovels[0].user,
                           configure=Grant.exactly(s.destination for s in shovels),
                           write=SHOVEL_WRITE, read=Grant.exactly(s.source for s in shovels)),)
