"""The topology plan: which queues, exchanges, bindings and policies a config needs, as plain data.

Pure and Pulumi-free. The components turn a plan into `pulumi_rabbitmq` resources one to one, so
what is decided here is what `pulumi up` applies. The rules (docs/design.md §2):
- wiring that never changes (queue type, dead-letter exchange and routing key, quorum
  at-least-once dead-lettering) goes in queue arguments, where no other policy can remove it;
- everything a user tunes (TTLs, limits) goes in one exactly-anchored policy per queue, which the
  provider updates in place: editing a delay never replaces a queue.
"""


from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ..migrations import plan_migrations
from ..model import naming, wire
from ..model.key_paths import entry_paths, with_paths
from ..model.plan_types import (
    BindingPlan,
    ExchangePlan,
    Grant,
    PermissionPlan,
    PolicyPlan,
    PolicyRole,
    QueuePlan,
    RetryablePlan,
    TopicGrant,
    UserLimitsPlan,
    VhostPlan,
    adopt,
    limit_sources,
    queue_limits,
    queue_policy,
    queue_type_arguments,
)
from ..model.problems import ConfigError
from ..model.stack_config import Binding, DelayLevels, Policy, Queue, Vhost
from ..strategies import strategy_of
from ..strategies.levels import plan_delay_levels


def plan_retryable(queue: Queue, path: str = "queue", delay_levels: DelayLevels | None = None,
                   imports: Iterable[str] = ()) -> RetryablePlan:
    """What the queue's strategy plans for it. `path`: the queue's config key path, named by the checks;
    `delay_levels`: the levels it retries through (strategies that use them); `imports`: the vhost's `import`
    entries, whose objects its plan adopts."""
    retry = queue.retry
    if retry is None:
        raise ValueError(f"queue {queue.name!r} has no retry block")
    return strategy_of(retry).plan(queue, retry, path, delay_levels, tuple(imports))


def _config_policy(key: str, policy: Policy, path: str, role: PolicyRole) -> PolicyPlan:
    return PolicyPlan(key, policy.name, policy.pattern, policy.priority, dict(policy.definition), policy.apply_to,
                      sources={k: f"{path}.definition.{k}" for k in policy.definition}, source=path, role=role)


def _adopted(plan: VhostPlan) -> list[tuple[str, str]]:
    """(kind, ID) of every planned object that adopts an existing one, its own and its retryables' and levels'."""
    owners = (*plan.retryables, *((plan.delay_levels,) if plan.delay_levels else ()))
    groups: list[tuple[str, tuple[Any, ...]]] = [
        ("queue", plan.queues), ("exchange", plan.exchanges), ("binding", plan.bindings), ("policy", plan.policies),
        ("operator_policy", plan.operator_policies),
        *((kind, group) for r in owners for kind, group in (("queue", r.queues), ("exchange", r.exchanges),
                                                            ("binding", r.bindings), ("policy", r.policies)))]
    return [(kind, entry.import_id) for kind, group in groups for entry in group if entry.import_id]


def _unmatched_imports(plan: VhostPlan, path: str) -> list[tuple[str, str]]:
    """Every `import` entry must adopt exactly one planned object: an ID nothing declares would never be
    imported, one that two objects match would be imported twice."""
    escaped = naming.id_vhost(plan.config.name)
    adopted = _adopted(plan)
    problems = []
    for i, entry in enumerate(plan.config.imports):
        kind, object_id = entry.split(" ", 1)
        count = adopted.count((kind, object_id))
        if kind == "binding" and not object_id.startswith(f"{escaped}/"):
            problems.append((f"{path}.import[{i}]", f"{object_id!r} is not a binding ID of this vhost "
                             f"({escaped}/source/destination/queue/properties_key)"))
        elif count == 0:
            problems.append((f"{path}.import[{i}]", f"no {kind.replace('_', ' ')} this vhost declares has the ID "
                             f"{object_id!r}; declare it exactly as the broker holds it, or remove the entry"))
        elif count > 1:
            problems.append((f"{path}.import[{i}]", f"{count} planned objects match {object_id!r}; an object can be "
                             "imported only once"))
    return problems


def _config_binding(queue: Queue, binding: Binding) -> BindingPlan:
    return BindingPlan(naming.binding_key(queue.name, binding.exchange, binding.routing_key, binding.arguments),
                       binding.exchange, queue.name, binding.routing_key, dict(binding.arguments),
                       source_external=binding.external)


def _operator_permissions(user: str, retryables: Iterable[RetryablePlan]) -> PermissionPlan:
    """An operator of parked messages (`rabbitmq-retry parked …`): reads (gets, acks, purges) every error
    queue, and publishes a redrive to where the messages came from (the exchanges the input queues are bound
    to) or to `Q.requeue`, which reaches only `Q`. It cannot consume an input queue or publish elsewhere."""
    retryables = tuple(retryables)
    return PermissionPlan(
        key=naming.permissions_key(user),
        user=user,
        configure=Grant.exactly(()),
        write=Grant.exactly([*(b.exchange for r in retryables for b in r.config.bindings),
                             *(x for r in retryables for x in r.redrive_exchanges)]),
        read=Grant.exactly(r.error_queue for r in retryables),
    )


def _strategy_topic_permissions(consumes: Iterable[str],
                                retryables: Mapping[str, RetryablePlan]) -> tuple[TopicGrant, ...]:
    """The topic permissions the strategies of the retryable queues an application consumes need (`levels`:
    its keys on each delay level limited to those queues)."""
    own: dict[str, list[RetryablePlan]] = {}
    for queue in consumes:
        if queue in retryables:
            own.setdefault(retryables[queue].strategy, []).append(retryables[queue])
    return tuple(grant for plans in own.values() for grant in strategy_of(plans[0].retry).topic_permissions(plans))


def _user_limits(vhost: Vhost, path: str) -> tuple[UserLimitsPlan, ...]:
    """The limits of each application that sets some, by RabbitMQ's names."""
    plans = []
    for at, app in with_paths(path, "applications", vhost.applications):
        limits = {name: value for name, value in (("max-connections", app.limits.max_connections),
                                                  ("max-channels", app.limits.max_channels)) if value is not None}
        if limits:
            plans.append(UserLimitsPlan(naming.user_limits_key(app.user), app.user, limits, f"{at}.limits"))
    return tuple(plans)


def plan_vhost(vhost: Vhost, path: str = "vhost", shovel_user: str | None = None) -> VhostPlan:
    """`path`: the vhost's config key path, e.g. "vhosts[shop]", named by the checks. `shovel_user`: the user this
    stack's shovels connect as (`naming.shovel_user(project, stack)`), required when a migration moves a queue;
    the program passes it, so the plan stays free of Pulumi."""
    exchanges = tuple(ExchangePlan(naming.exchange_key(e.name), e.name, e.type) for e in vhost.exchanges)
    queue_paths = entry_paths(path, "queues", vhost.queues)
    plain = [(at, q) for at, q in zip(queue_paths, vhost.queues, strict=True) if q.retry is None]
    single_active = {wire.SINGLE_ACTIVE_CONSUMER.argument: True}
    queues = tuple(QueuePlan(naming.plain_queue_key(q.name), q.name, q.queue_type, dict(q.arguments) if q.arguments
                             is not None else {**queue_type_arguments(q),
                                               **(single_active if q.single_active_consumer else {})},
                             "plain") for _, q in plain)
    policies = (*(queue_policy(naming.plain_queue_policy_key(q.name), q.name, q.policy_priority, limits,
                               limit_sources(at, q))
                  for at, q in plain if (limits := queue_limits(q))),
                *(_config_policy(naming.config_policy_key(p.name), p, at, "config")
                  for at, p in with_paths(path, "policies", vhost.policies)))
    bindings = tuple(_config_binding(q, b) for q in vhost.queues for b in q.bindings)
    imports = vhost.imports
    retryables = tuple(plan_retryable(q, at, vhost.delay_levels, imports)
                       for at, q in zip(queue_paths, vhost.queues, strict=True) if q.retry is not None)
    operator_policies = tuple(_config_policy(naming.operator_policy_key(p.name), p, at, "operator")
                              for at, p in with_paths(path, "operator_policies", vhost.operator_policies))
    retryable_queues = {r.config.name: r for r in retryables}
    permissions = tuple(PermissionPlan(
        key=naming.permissions_key(app.user),
        user=app.user,
        configure=Grant.exactly(()),
        # Retries (stepped republish, levels) and parking publish to the consumed queue's own exchanges.
        write=Grant.exactly([*app.publishes, *(x for q in app.consumes if q in retryable_queues
                                               for x in retryable_queues[q].consumer_exchanges)]),
        read=Grant.exactly(app.consumes),
        topic=(*map(TopicGrant.of, app.topic_permissions),
               *_strategy_topic_permissions(app.consumes, retryable_queues)),
    ) for app in vhost.applications)
    permissions += tuple(_operator_permissions(operator.user, retryables) for operator in vhost.operators)
    delay_levels = None if vhost.delay_levels is None else plan_delay_levels(vhost.delay_levels, imports,
                                                                             f"{path}.delay_levels")
    if vhost.migrations:
        migrated = plan_migrations(vhost, path, retryables, delay_levels, imports, plan_retryable, plan_delay_levels,
                                   shovel_user)
        retryables, delay_levels = migrated.retryables, migrated.delay_levels
        bindings += migrated.bindings
        migrations, shovel_permissions = migrated.migrations, migrated.shovel_permissions
    else:
        migrations, shovel_permissions = (), ()
    plan = VhostPlan(vhost, adopt(exchanges, "exchange", imports), adopt(queues, "queue", imports),
                     adopt(tuple(policies), "policy", imports), adopt(bindings, "binding", imports), retryables,
                     adopt(operator_policies, "operator_policy", imports), permissions, delay_levels,
                     migrations=migrations, shovel_permissions=shovel_permissions,
                     user_limits=_user_limits(vhost, path))
    if problems := _unmatched_imports(plan, path):
        raise ConfigError(problems)
    return plan
