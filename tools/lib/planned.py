"""What the plan knew about each resource a recording lists: its retryable queue (family), its strategy and its
role, by the resource's place in the stack (component chain, kind and logical name).

The review plans the same stack file it records, with the same project's own `components` (BASE's for BASE),
and looks every resource up here instead of recovering its role from its name: a change of a logical-key format
in `components/naming.py` changes the plan and the recording alike. Pure planning, no Pulumi engine.
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tools.lib.engine import short_type
from tools.lib.mockrun import Registered, root_components, stack_config

NAMESPACE = "rabbitmq-retry"
"""components.config.keys.NAMESPACE, written again: this module imports no `components` of its own, only each
side's (BASE's for BASE) when it plans that side."""
QueueKey = tuple[str, str]
"""(vhost, queue) of a retryable queue."""


class PlanIndexError(Exception):
    """The project cannot be planned by its own planner."""


@dataclass(frozen=True)
class Planned:
    """One resource as the plan has it."""

    kind: str
    """`Queue`, `Policy`, `RetryableQueue`, …: the last segment of its type."""
    vhost: str
    family: QueueKey | None
    """The retryable queue it belongs to: the RetryableQueue component and its children."""
    leads_to: QueueKey | None
    """The retryable queue a config binding of the vhost leads to (`events → orders`)."""
    strategy: str | None
    """Its retryable queue's strategy."""
    role: str
    """A queue's role (`input`, `wait`, `error`, `plain`, `delay`), a policy's (`queue`: derived for a planned
    queue, `config`: a `policies[]` entry, `operator`: an `operator_policies[]` entry), else ""."""


PlanIndex = Mapping[str, Planned]
"""Planned resources by `place` (component chain, kind and logical name)."""


def place(record: Registered) -> str:
    """`Vhost$RetryableQueue$Queue::shop-orders-wait-1`: the chain of short types and the logical name, as its
    URN has them (`urn:pulumi:<stack>::<project>::<type chain>::<name>`)."""
    chain = record.urn.split("::", 3)[2]
    return "$".join(short_type(part) for part in chain.split("$")) + f"::{record.name}"


def _role(entry: Any) -> str:
    role = getattr(entry, "role", "")
    return role if isinstance(role, str) else ""


def index_plans(plans: Iterable[tuple[str, Any]], layout: Any) -> dict[str, Planned]:
    """Every resource the Vhost components of `plans` ((component name, VhostPlan)) register, by `place`, walked
    by `layout` (`components.layout` of the same project, whose tables the components register by)."""
    index: dict[str, Planned] = {}
    plans = list(plans)
    for kind, name in getattr(layout, "stack_children", lambda _: [])(plans):
        index[f"{kind}::{name}"] = Planned(kind, "", None, None, None, "")
    for component, plan in plans:
        vhost = plan.config.name
        strategies = {retryable.config.name: retryable.strategy for retryable in plan.retryables}
        index[f"Vhost::{component}"] = Planned("Vhost", vhost, None, None, None, "")

        def walk(chain: str, slots: Any, name: str, entries_of: Any, family: QueueKey | None,
                 vhost: str = vhost, strategies: Mapping[str, str] = strategies) -> None:
            for slot, child, entry in layout.children(name, slots, entries_of):
                own = (vhost, entry.config.name) if slot.kind == "RetryableQueue" else family
                leads_to = None
                if own is None and slot.kind == "Binding" and getattr(entry, "destination_type", "") == "queue" \
                        and entry.destination in strategies:
                    leads_to = (vhost, entry.destination)
                strategy = strategies.get(own[1]) if own is not None else None
                index[f"{chain}${slot.kind}::{child}"] = Planned(slot.kind, vhost, own, leads_to, strategy,
                                                                 _role(entry))
                if slot.kind in layout.NESTED:
                    walk(f"{chain}${slot.kind}", layout.NESTED[slot.kind], child, entry, own)

        walk("Vhost", layout.VHOST, component, plan, None)
    return index


def stack_values(stack: str, root: Path) -> dict[str, Any]:
    """The stack file's `rabbitmq-retry:*` keys as the program reads them (structured values decoded)."""
    raw, _ = stack_config(stack, root)
    values: dict[str, Any] = {}
    for key, value in raw.items():
        if key.partition(":")[0] != NAMESPACE:
            continue
        try:
            values[key.partition(":")[2]] = json.loads(value)
        except ValueError:
            values[key.partition(":")[2]] = value
    return values


def plan_index(stack: str, root: Path) -> dict[str, Planned]:
    """`root`'s stack `stack` planned by `root`'s own planner (`components.stack.plan_stack`), indexed by
    `place`. PlanIndexError when `root`'s components have no such planner (older than one plan per run) or
    its config is refused (the recording of the same side fails first, with the program's own message)."""
    with root_components(root):
        try:
            config = importlib.import_module("components.config")
            stack_module = importlib.import_module("components.stack")
            layout = importlib.import_module("components.layout")
            planner = stack_module.plan_stack
            layout.children, layout.NESTED, layout.VHOST  # noqa: B018 (what index_plans walks by)
        except (ImportError, AttributeError) as error:
            raise PlanIndexError(f"{root} has no planner the review can run ({error}): it predates one plan per "
                                 "run (components.stack.plan_stack); review against a newer BASE") from None
        try:
            plans = planner(config.load_stack_config(stack_values(stack, root)))
        except Exception as error:  # the project's own ConfigError or TopologyError
            raise PlanIndexError(f"the planner refuses {root / f'Pulumi.{stack}.yaml'}: {error}") from None
        return index_plans(plans, layout)


def planned(record: Registered, index: PlanIndex) -> Planned | None:
    """What the plan knew about `record`; None for what no Vhost component registers (the stack itself)."""
    return index.get(place(record))


def family_of(record: Registered, index: PlanIndex) -> QueueKey | None:
    """The retryable queue `record` is part of (None for the vhost's other resources)."""
    found = planned(record, index)
    return found.family if found is not None else None


def unplanned(recording: Iterable[Registered], index: PlanIndex) -> list[str]:
    """Resources a Vhost component registered that the plan does not know: the plan and the program disagree."""
    return sorted(place(r) for r in recording if r.type != "pulumi:pulumi:Stack" and place(r) not in index)
