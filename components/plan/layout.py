"""The resource layout: which children each component registers, of which kind, under which logical key.

The one description of every URN this project creates. The components declare exactly these entries, in
this order (one builder per kind, in `resources.py`); the stack's URN clash check (`logical_names`) and the
tests iterate the same tables. A child registered anywhere else would be missed by the clash check:
`tests/test_components.py` compares these tables with what the components register.

Pure and Pulumi-free. A logical key is part of a URN: changing one replaces the resource
(`tests/snapshots/` pins them).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from ..model.naming import (
    DELAY_LEVELS_KEY,
    PATH_GUARD_KEY,
    REMOVAL_GUARD_KEY,
    SHOVEL_USER,
    VHOST_KEY,
    logical_name,
    retryable_key,
    user_key,
)
from ..model.plan_types import DelayLevelsPlan, RetryablePlan, VhostPlan

PlanT = TypeVar("PlanT")


@dataclass(frozen=True)
class Slot(Generic[PlanT]):
    """One row of a layout: every plan entry `entries` yields becomes one child of type `kind`."""

    kind: str
    """Last segment of the child's type token (`rabbitmq:index/queue:Queue` → `Queue`); part of its URN."""
    entries: Callable[[PlanT], Iterable[Any]]
    """The plan entries this row declares, in registration order."""
    key: Callable[[Any], str]
    """Logical key of one entry: the child is registered as `logical_name(component, key)`."""


@dataclass(frozen=True)
class GuardEntry:
    """One of a component's two path guards (`resources.open_path_guard`, `close_path_guard`)."""

    key: str
    opens: bool
    """The path guard, declared first; else the removal guard, declared last."""


PATH_GUARD = (GuardEntry(PATH_GUARD_KEY, True),)
REMOVAL_GUARD = (GuardEntry(REMOVAL_GUARD_KEY, False),)


def _key(entry: Any) -> str:
    """Queue, exchange, binding and policy plans carry their logical key."""
    return str(entry.key)


RETRYABLE_QUEUE: tuple[Slot[RetryablePlan | DelayLevelsPlan], ...] = (
    # Policies first: a queue depends on its policy (see resources.declare_queue).
    Slot("Policy", lambda plan: plan.policies, _key),
    Slot("Queue", lambda plan: plan.queues, _key),
    # Every exchange before any binding: a delay level's exchange is bound to the one below it.
    Slot("Exchange", lambda plan: plan.exchanges, _key),
    Slot("Binding", lambda plan: plan.bindings, _key),
)
"""Children of a RetryableQueue component, whose plan is a `RetryablePlan`."""
DELAY_LEVELS = RETRYABLE_QUEUE
"""Children of a DelayLevels component (a vhost's shared delay levels, a `DelayLevelsPlan`): the same rows."""

VHOST: tuple[Slot[VhostPlan], ...] = (
    # First: every other child waits for the path guard (docs/guard.md).
    Slot("Stash", lambda _: PATH_GUARD, _key),
    Slot("VHost", lambda plan: () if plan.config.existing else (plan.config,), lambda _: VHOST_KEY),
    Slot("Exchange", lambda plan: plan.exchanges, _key),
    Slot("Policy", lambda plan: plan.policies, _key),
    Slot("Queue", lambda plan: plan.queues, _key),
    # Before the retryable queues: a `levels` queue is bound to the delivery exchange.
    Slot("DelayLevels", lambda plan: () if plan.delay_levels is None else (plan.delay_levels,),
         lambda _: DELAY_LEVELS_KEY),
    Slot("RetryableQueue", lambda plan: plan.retryables, lambda retryable: retryable_key(retryable.config.name)),
    # After every exchange and queue: a binding refers to both by their resources' outputs.
    Slot("Binding", lambda plan: plan.bindings, _key),
    Slot("OperatorPolicy", lambda plan: plan.operator_policies, _key),
    Slot("User", lambda plan: plan.permissions, lambda grant: grant.user_key),
    Slot("Permissions", lambda plan: plan.permissions, _key),
    Slot("TopicPermissions", lambda plan: [grant for grant in plan.permissions if grant.topic],
         lambda grant: grant.topic_key),
    # Migrations: the shovel user's permissions, then the shovels, which connect as that user.
    Slot("Permissions", lambda plan: plan.shovel_permissions, _key),
    Slot("Shovel", lambda plan: plan.shovels, _key),
    # Last: a stack without user limits registers what it always did, in the same order.
    Slot("UserLimits", lambda plan: plan.user_limits, _key),
    # After everything: the removal guard waits for every other child, so the engine deletes it first.
    Slot("Stash", lambda _: REMOVAL_GUARD, _key),
)
"""Children of a Vhost component, whose plan is a `VhostPlan`."""

NESTED: dict[str, tuple[Slot[Any], ...]] = {"RetryableQueue": RETRYABLE_QUEUE, "DelayLevels": DELAY_LEVELS}
"""Child kinds that are components themselves, with their layout; the entry is their plan."""


def stack_children(plans: Iterable[tuple[str, VhostPlan]]) -> list[tuple[str, str]]:
    """(kind, logical name) of what the stack registers outside every Vhost component: the one shovel user, while
    a migration of any vhost moves a queue (`stack.declare_shovel_user`)."""
    return [("User", user_key(SHOVEL_USER))] if any(plan.shovels for _, plan in plans) else []


def children(component: str, layout: Iterable[Slot[PlanT]], plan: PlanT) -> Iterator[tuple[Slot[PlanT], str, Any]]:
    """(row, logical name, plan entry) of each child the component `component` registers, in order."""
    for slot in layout:
        for entry in slot.entries(plan):
            yield slot, logical_name(component, slot.key(entry)), entry


Placed = tuple[tuple[str, ...], Slot[Any], str, Any, Any]
"""(kinds of the components above it, its row, its logical name, its plan entry, the plan of the component that
registers it)."""


def walk(component: str, plan: VhostPlan) -> Iterator[Placed]:
    """Everything the Vhost component `component` registers below itself, nested components included, in order:
    the one walk of these tables, for the clash check and for the tools that look a registration up in the plan."""
    def nested(chain: tuple[str, ...], layout: Iterable[Slot[Any]], name: str, owner: Any) -> Iterator[Placed]:
        for slot, child, entry in children(name, layout, owner):
            yield chain, slot, child, entry, owner
            if slot.kind in NESTED:
                yield from nested((*chain, slot.kind), NESTED[slot.kind], child, entry)

    yield from nested(("Vhost",), VHOST, component, plan)


def logical_names(component: str, plan: VhostPlan) -> list[tuple[str, str, str]]:
    """(parent type chain, kind, logical name) of everything the Vhost component `component` registers,
    itself and nested components included: what must be unique in a stack for the URNs to be."""
    return [("", "Vhost", component),
            *(("$".join(chain), slot.kind, name) for chain, slot, name, _, _ in walk(component, plan))]
