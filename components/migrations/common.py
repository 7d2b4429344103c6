"""What the kinds' modules share: parsing a queue's name, keeping the old config's plan entries beside the current
ones (the drains), and what the review says of a drain."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeVar

from ..model.fields import INVALID, Invalid, Problems, entity_name
from ..model.plan_types import QueuePlan
from .base import Format, Reviewed

E = TypeVar("E", bound=Any)


def queue_name(p: Problems, path: str, value: object) -> str | Invalid:
    if value is None:
        p.add(path, "missing; name a queue of this vhost")
        return INVALID
    return entity_name(p, path, value, "queue")


def keep(current: Sequence[E], old: Sequence[E]) -> tuple[E, ...]:
    """`current`, then every entry of `old` whose logical key `current` lacks, exactly as `old` planned it."""
    keys = {entry.key for entry in current}
    return (*current, *(entry for entry in old if entry.key not in keys))


def dropped(current: Sequence[QueuePlan], old: Sequence[QueuePlan]) -> tuple[str, ...]:
    keys = {q.key for q in current}
    return tuple(q.name for q in old if q.key not in keys)


def _names(names: Sequence[str], code: Format) -> str:
    return ", ".join(code(n) for n in names)


def review_drain(m: Reviewed, code: Format, status: str) -> list[str]:
    """A drain's step drain: what it keeps declared, and when to retire."""
    return [f"- Kept out of the contract, declared exactly as before until retire: {_names(m.old_queues, code)}. "
            "Consumers on the new contract stop routing there; what waits there returns on time, and so does "
            "what a consumer still on the old contract routes there: the contract rows above say what breaks "
            "from step retire on.",
            f"- Next: once {status} says drained and the consumers run the new contract, set `step: retire` in "
            "one commit."]


def review_drain_retire(breaks: str) -> list[str]:
    """A drain's step retire, `breaks` what it breaks for a consumer still on the contract from before step drain."""
    return [f"- Consumers must run the contract of step drain by now: {breaks}",
            "- After this is applied, removing the entry changes no resource."]


DRAINED = "drained: set step: retire in a commit"
"""`make migrate-status`'s next step once a drain's old queues are empty."""
