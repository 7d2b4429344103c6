"""Migrations: what each `migrations[]` entry keeps, adds and retires in a vhost's plan. The one place that knows.

Pure and Pulumi-free. A migration never changes an entry the old config planned: what it keeps is the old
config's own plan, so its inputs stay byte-identical and nothing is replaced (docs/config.md: Migrations).
- `move`, step move: the old queue and its successor are both ordinary queues of the config; the plan adds one
  shovel per moved queue (the queue, and its error queue) and the shovel user's permissions in the vhost.
  What waits in the old queue's wait tiers (or delay levels, or inside it: native) returns to the old queue on
  time and the shovel carries it on, so no wait restarts and none ends early.
- `move`, step retire: the old queue is gone from the config, so its objects leave the plan (the queue guard
  refuses to delete one that still holds messages); with delay levels, the successor is bound for the old
  queue's key, so a copy still waiting for the old queue reaches the successor.
- `drain_tiers` / `drain_levels`, step drain: the tiers (levels) the change removed stay planned exactly as the
  old config planned them, out of the contract; step retire: they leave the plan.
Strategies know nothing of migrations: a drain keeps the entries of the old config's plan whose logical key
the current plan lacks, whatever strategy planned them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, TypeVar

from . import naming
from .config.model import DelayLevels, Migration, Vhost
from .entries import BindingPlan, DelayLevelsPlan, PermissionPlan, QueuePlan, RetryablePlan, exact_names

SHOVEL_ACK_MODE = "on-confirm"
"""The only lossless acknowledgement mode: the shovel acks a message at the source once the destination confirmed it."""
SHOVEL_DELETE_AFTER = "never"
"""The stack removes its shovels by config: `queue-length` counts only ready messages at (re)connect and a shovel
may delete itself before everything moved (rabbitmq-server#14636)."""
SHOVEL_WRITE = r"^amq\.default$"
"""A shovel with a destination queue publishes through the default exchange."""
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
    """Its config key path, e.g. "vhosts[0].migrations[1]"."""
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


E = TypeVar("E", bound=Any)


def _keep(current: Sequence[E], old: Sequence[E]) -> tuple[E, ...]:
    """`current`, then every entry of `old` whose logical key `current` lacks, exactly as `old` planned it."""
    keys = {entry.key for entry in current}
    return (*current, *(entry for entry in old if entry.key not in keys))


def _dropped(current: Sequence[QueuePlan], old: Sequence[QueuePlan]) -> tuple[str, ...]:
    keys = {q.key for q in current}
    return tuple(q.name for q in old if q.key not in keys)


def _resourced(policies: Iterable[Any], old_path: str, new_path: str) -> tuple[Any, ...]:
    """Kept policies name the migration entry that keeps them as the source of their values."""
    return tuple(replace(p, sources={k: v.replace(old_path, new_path) for k, v in p.sources.items()})
                 for p in policies)


def _drain_tiers(m: Migration, mpath: str, plan: RetryablePlan[Any], path: str, imports: tuple[str, ...],
                 planner: Callable[..., RetryablePlan[Any]]) -> tuple[RetryablePlan[Any], tuple[str, ...]]:
    """The queue's plan with the tiers its old delays had and its current ones lack, kept out of the contract
    (`tiers`, `retry` stay the current ones). Step retire: the plan as it is; the names are what retires."""
    queue = plan.config
    old_queue = replace(queue, retry=replace(plan.retry, delays_ms=m.delays_ms))
    old = planner(old_queue, path, plan.delay_levels, imports)
    dropped = _dropped(plan.queues, old.queues)
    if m.retiring:
        return plan, dropped
    kept_policies = _resourced((p for p in old.policies if p.key not in {q.key for q in plan.policies}),
                               f"{path}.retry.delays", f"{mpath}.drain_tiers.delays")
    return replace(plan, queues=_keep(plan.queues, old.queues), exchanges=_keep(plan.exchanges, old.exchanges),
                   bindings=_keep(plan.bindings, old.bindings), policies=(*plan.policies, *kept_policies),
                   draining=tuple(t for t in old.tiers if t.queue in dropped)), dropped


def _drain_levels(m: Migration, levels: DelayLevelsPlan, imports: tuple[str, ...], levels_path: str,
                  planner: Callable[..., DelayLevelsPlan]) -> tuple[DelayLevelsPlan, tuple[str, ...]]:
    config = levels.config
    old = planner(DelayLevels(config.unit_ms, m.max_delay_ms, config.queue_type, config.policy_priority), imports,
                  levels_path)
    dropped = _dropped(levels.queues, old.queues)
    if m.retiring:
        return levels, dropped
    kept = replace(levels, queues=_keep(levels.queues, old.queues), exchanges=_keep(levels.exchanges, old.exchanges),
                   bindings=_keep(levels.bindings, old.bindings), policies=_keep(levels.policies, old.policies))
    return kept, dropped


def _required_shovel_user(m: Migration, mpath: str, shovel_user: str | None) -> str:
    if shovel_user is None:
        raise ValueError(f"{mpath}: migration {m.name} moves a queue with shovels; plan the vhost with the stack's "
                         "shovel user (naming.shovel_user(project, stack))")
    return shovel_user


def _move_external(m: Migration, mpath: str, shovel_user: str | None) -> MigrationPlan:
    """An external move: the old objects are nobody's in the stack, so nothing of them is planned. Step move adds
    the shovels (the old queue, and its error queue when named, to the successor's); step retire removes them, and
    `make migrate-retire` deletes the old objects on the broker once each is empty and unused."""
    assert m.external is not None
    old_queues = (*m.external.queues, m.source, *((m.external.error_queue,) if m.external.error_queue else ()))
    if m.retiring:
        return MigrationPlan(m, mpath, old_queues=old_queues)
    shovel_user = _required_shovel_user(m, mpath, shovel_user)
    shovels = [ShovelPlan(naming.shovel_key(m.name), naming.shovel(m.name), m.source, m.target, m.name,
                          shovel_user, external_source=True)]
    if m.external.error_queue:
        shovels.append(ShovelPlan(naming.shovel_key(m.name, error=True), naming.shovel(m.name, error=True),
                                  m.external.error_queue, naming.error_queue(m.target), m.name, shovel_user,
                                  external_source=True))
    return MigrationPlan(m, mpath, shovels=tuple(shovels), old_queues=old_queues)


def _move(m: Migration, mpath: str, vhost: Vhost, retryables: Mapping[str, RetryablePlan[Any]],
          shovel_user: str | None) -> MigrationPlan:
    if m.external is not None:
        return _move_external(m, mpath, shovel_user)
    old = retryables.get(m.source)
    if m.retiring:
        bindings = (() if vhost.delay_levels is None else
                    (BindingPlan(naming.migration_binding_key(m.name), naming.DELIVERY_EXCHANGE, m.target,
                                 naming.delivery_pattern(m.source)),))
        return MigrationPlan(m, mpath, bindings=bindings,
                             old_queues=(m.source, naming.error_queue(m.source)))
    shovel_user = _required_shovel_user(m, mpath, shovel_user)
    shovels = [ShovelPlan(naming.shovel_key(m.name), naming.shovel(m.name), m.source, m.target, m.name, shovel_user)]
    if old is not None:
        shovels.append(ShovelPlan(naming.shovel_key(m.name, error=True), naming.shovel(m.name, error=True),
                                  old.error_queue, naming.error_queue(m.target), m.name, shovel_user))
    return MigrationPlan(m, mpath, shovels=tuple(shovels),
                         old_queues=tuple(q.name for q in old.queues) if old is not None else (m.source,))


def shovel_permissions(shovels: Sequence[ShovelPlan]) -> tuple[PermissionPlan, ...]:
    """The shovel user's permissions in one vhost, the least both brokers need (measured on 3.10.8 and 4.3.6): read
    the queues it moves from; write only the default exchange it publishes through (not the destination queue);
    configure its destination queues, which it declares (4.3 refuses the shovel without; the source needs none).
    The logical key names no stack: a stack has one shovel user."""
    if not shovels:
        return ()
    return (PermissionPlan(key=naming.permissions_key(naming.SHOVEL_USER), user=shovels[0].user,
                           configure=exact_names(s.destination for s in shovels),
                           write=SHOVEL_WRITE, read=exact_names(s.source for s in shovels)),)


def migration_contract(m: Migration, queue: str) -> dict[str, str] | None:
    """The contract's `migration` object of `queue`: set on a move's old queue and its successor only."""
    if m.kind != "move" or queue not in (m.source, m.target):
        return None
    if queue == m.source:
        return {"name": m.name, "step": m.step, "successor": m.target}
    return {"name": m.name, "step": m.step, "predecessor": m.source, "drains_by": DRAINS_BY}


def plan_migrations(vhost: Vhost, path: str, retryables: tuple[RetryablePlan[Any], ...],
                    delay_levels: DelayLevelsPlan | None, imports: tuple[str, ...],
                    plan_retryable: Callable[..., RetryablePlan[Any]],
                    plan_levels: Callable[..., DelayLevelsPlan], shovel_user: str | None = None) -> Migrated:
    """Apply the vhost's migrations to its planned retryables and delay levels (planned from the current config);
    `plan_retryable` and `plan_levels` plan the old config's objects the same way. `shovel_user`: the stack's
    shovel user (`naming.shovel_user`), required when a migration moves a queue in step move."""
    by_name = {r.config.name: r for r in retryables}
    plans: list[MigrationPlan] = []
    for m in vhost.migrations:
        mpath = f"{path}.migrations[{m.index}]"
        if m.kind == "move":
            plans.append(_move(m, mpath, vhost, by_name, shovel_user))
            for queue in (m.source, m.target):
                if queue in by_name and (contract := migration_contract(m, queue)) is not None:
                    by_name[queue] = replace(by_name[queue], migration=contract)
        elif m.kind == "drain_tiers":
            index = next(i for i, q in enumerate(vhost.queues) if q.name == m.source)
            by_name[m.source], dropped = _drain_tiers(m, mpath, by_name[m.source], f"{path}.queues[{index}]",
                                                      imports, plan_retryable)
            plans.append(MigrationPlan(m, mpath, old_queues=dropped))
        else:
            assert delay_levels is not None
            delay_levels, dropped = _drain_levels(m, delay_levels, imports, f"{path}.delay_levels", plan_levels)
            plans.append(MigrationPlan(m, mpath, old_queues=dropped))
    shovels = [s for m in plans for s in m.shovels]
    return Migrated(tuple(by_name[r.config.name] for r in retryables), delay_levels, tuple(plans),
                    shovel_permissions(shovels))

