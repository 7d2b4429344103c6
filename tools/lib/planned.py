"""What the plan knew about each resource a recording lists: its retryable queue (family), its strategy and its
role, by the resource's URN.

An evaluation (tools/lib/evaluation.py) runs a checkout's program once, and indexes its registrations here with the
plans that same run made, walked by the same project's own `components.plan.layout` (`walk`): the review looks every
resource up here instead of recovering its role from its name, so a change of a logical-key format in
`components/model/naming.py` changes the plan and the recording alike. A registration is matched to its plan entry by
what the recording says of it (its parents' kinds, its own kind and logical name), never by a URN rebuilt from names.
A grant (Permissions, TopicPermissions) carries the names each of its regexes allows as the plan built them
(`components.model.plan_types.Grant`), so that the review never reads a regex back.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tools.lib.engine import short_type
from tools.lib.mockrun import Registered

QueueKey = tuple[str, str]
"""(vhost, queue) of a retryable queue."""
STACK = "pulumi:pulumi:Stack"


@dataclass(frozen=True)
class Allowed:
    """One regex a planned grant gives RabbitMQ, with the names it allows as the plan built it."""

    exchange: str | None
    """A topic permission's exchange; None for a permission of the vhost."""
    kind: str
    """`configure`, `write` or `read`."""
    regex: str
    names: tuple[str, ...] | None
    """None: not a finite list of names (a pattern, or a plan that kept no names)."""


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
    grants: tuple[Allowed, ...] = ()
    """What a Permissions or TopicPermissions registration allows, per regex; () for anything else."""


PlanIndex = Mapping[str, Planned]
"""Planned resources by the URN the program registered them under."""
Place = tuple[tuple[str, ...], str, str]
"""(kinds of the components above it, its kind, its logical name): where a registration is in the stack."""


def planned_from(item: Mapping[str, Any]) -> Planned:
    """A plan index entry back from its JSON (`dataclasses.asdict`): lists as the tuples it holds, its grants as
    `Allowed`. An evaluation by tools that kept no grants has none (the review then treats any change of a regex as
    widening)."""
    def listed(value: Any) -> Any:
        return tuple(value) if isinstance(value, list) else value
    return Planned(**{**{key: listed(value) for key, value in item.items()},
                      "grants": tuple(Allowed(**{key: listed(value) for key, value in allowed.items()})
                                      for allowed in item.get("grants", ()))})


def _allowed(kind: str, entry: Any) -> tuple[Allowed, ...]:
    """The regexes a Permissions or TopicPermissions entry (`PermissionPlan`) grants, each with its names. A plan
    whose grants are bare regexes (a checkout from before `components.model.plan_types.Grant`) knows no names: the
    review then treats any change of them as widening."""
    if kind == "Permissions":
        parts = [(None, part, getattr(entry, part)) for part in ("configure", "write", "read")]
    elif kind == "TopicPermissions":
        parts = [(topic.exchange, part, getattr(topic, part)) for topic in entry.topic for part in ("write", "read")]
    else:
        return ()
    return tuple(Allowed(exchange, part, getattr(grant, "regex", grant), getattr(grant, "names", None))
                 for exchange, part, grant in parts)


def _places(plans: Sequence[tuple[str, Any]], layout: Any) -> dict[Place, Planned]:
    """Every resource the program registers for `plans` ((component name, VhostPlan)), by place, walked by `layout`
    (`components.plan.layout` of the same project, whose tables the components register by)."""
    found: dict[Place, Planned] = {}
    for kind, name in layout.stack_children(plans):
        found[((), kind, name)] = Planned(kind, "", None, None, None, "")
    for component, plan in plans:
        vhost = plan.config.name
        strategies = {retryable.config.name: retryable.strategy for retryable in plan.retryables}
        found[((), "Vhost", component)] = Planned("Vhost", vhost, None, None, None, "")
        for chain, slot, name, entry, owner in layout.walk(component, plan):
            if slot.kind == "RetryableQueue":
                family: QueueKey | None = (vhost, entry.config.name)
            elif chain[-1] == "RetryableQueue":
                family = (vhost, owner.config.name)
            else:
                family = None
            leads_to = None
            if family is None and slot.kind == "Binding" and getattr(entry, "destination_type", "") == "queue" \
                    and entry.destination in strategies:
                leads_to = (vhost, entry.destination)
            strategy = strategies.get(family[1]) if family is not None else None
            role = getattr(entry, "role", "")
            found[(chain, slot.kind, name)] = Planned(slot.kind, vhost, family, leads_to, strategy,
                                                      role if isinstance(role, str) else "",
                                                      _allowed(slot.kind, entry))
    return found


def index_plans(recording: Iterable[Registered], plans: Sequence[tuple[str, Any]], layout: Any) -> dict[str, Planned]:
    """What the plans knew of each registration of `recording` (the same program run), by URN; a registration the
    plans do not have is left out (`unplanned` names it)."""
    places = _places(plans, layout)
    records = list(recording)
    by_urn = {r.urn: r for r in records}
    chains: dict[str, tuple[str, ...]] = {}

    def chain(record: Registered) -> tuple[str, ...]:
        """The kinds of the components above `record`, below the stack."""
        parent = by_urn.get(record.parent or "")
        if parent is None or parent.type == STACK:
            return ()
        if parent.urn not in chains:
            chains[parent.urn] = (*chain(parent), short_type(parent.type))
        return chains[parent.urn]

    index: dict[str, Planned] = {}
    for record in records:
        if record.type != STACK and (found := places.get((chain(record), short_type(record.type), record.name))):
            index[record.urn] = found
    return index


def family_of(record: Registered, index: PlanIndex) -> QueueKey | None:
    """The retryable queue `record` is part of (None for the vhost's other resources)."""
    found = index.get(record.urn)
    return found.family if found is not None else None


def unplanned(recording: Iterable[Registered], index: PlanIndex) -> list[str]:
    """Resources the program registered that the plan does not know: the plan and the program disagree."""
    return sorted(r.urn for r in recording if r.type != STACK and r.urn not in index)
