"""Does a change to a user, its permissions or its topic permissions grant more than before, and which names does a
changed permission add and remove? Both from the names the plan says each regex allows (`planned.Allowed`, built
with the regex by `components.model.plan_types.Grant`): no regex is read back into names here.

Exact where the plans of both sides built the regex from a finite list of names. Anything else (a grant with no plan
entry, such as a user permission the recording has but the plan index does not know; a pattern, such as the
`levels` strategy's routing keys or a topic permission written in the config; a regex other than the one the plan
built) is not a list we know: any change of it counts as widening."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tools.lib import engine
from tools.lib.engine import Step
from tools.lib.planned import Planned

Names = tuple[str, ...] | None
"""The names a regex allows; None when it is not known as a finite list."""
Sides = tuple[Planned | None, Planned | None]
"""What BASE's plan and the working tree's plan knew of a step's resource (None: no entry)."""
NO_PLAN: Sides = (None, None)


def names_of(plan: Planned | None, exchange: str | None, kind: str, regex: str) -> Names:
    """The names `regex` allows as the plan that granted it built it (`exchange`: a topic permission's, None for a
    permission of the vhost); None when the plan has no such grant, built it as a pattern, or built another regex."""
    for allowed in plan.grants if plan is not None else ():
        if (allowed.exchange, allowed.kind, allowed.regex) == (exchange, kind, regex):
            return allowed.names
    return None


def narrows(old: str, new: str, old_names: Names, new_names: Names) -> bool:
    """Does the regex `new` allow nothing that `old` did not? An unchanged regex does not widen; a changed one
    narrows only when both are known lists of names and every name of `new` is one of `old`. Any other change of
    a regex is treated as widening: deciding regex inclusion in general is not worth the risk."""
    if old == new:
        return True
    return old_names is not None and new_names is not None and set(new_names) <= set(old_names)


def permissions_of(resource_type: str, inputs: Mapping[str, Any] | None) -> dict[str | None, Mapping[str, Any]]:
    """The regexes of a Permissions (by None: the vhost's configure, write and read) or of a TopicPermissions (by
    exchange), as registered."""
    if resource_type == engine.PERMISSIONS:
        return {None: (inputs or {}).get("permissions") or {}}
    return {str(p.get("exchange")): p for p in (inputs or {}).get("permissions") or []}


def kinds(exchange: str | None) -> tuple[str, ...]:
    """The regexes of a permission of the vhost, or of a topic permission on `exchange`."""
    return ("configure", "write", "read") if exchange is None else ("write", "read")


def widens(step: Step, sides: Sides = NO_PLAN) -> bool:
    """An update of a User (a new tag), Permissions or TopicPermissions (per exchange) that grants more. `sides`:
    what each side's plan knew of the resource (without it, any change of a regex widens)."""
    old, new = step.old or {}, step.new or {}
    if step.type == engine.USER:  # a new tag (e.g. administrator) grants more
        return not set(new.get("tags") or []) <= set(old.get("tags") or [])
    before_by, after_by = permissions_of(step.type, old), permissions_of(step.type, new)
    for exchange, after in after_by.items():
        before = before_by.get(exchange)
        if before is None:
            return True  # a topic permission on an exchange it had none on
        for kind in kinds(exchange):
            was, now = str(before.get(kind, "")), str(after.get(kind, ""))
            if not narrows(was, now, names_of(sides[0], exchange, kind, was), names_of(sides[1], exchange, kind, now)):
                return True
    return False
