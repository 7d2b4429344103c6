"""The risk of each step of a plan, as a review labels it: data loss, access, or safe."""

from __future__ import annotations

from tools import engine
from tools.engine import Step
from tools.permissions import widens

DATA_LOSS, ACCESS, SAFE = "data loss", "access", "safe"
ORDER = {DATA_LOSS: 0, ACCESS: 1, SAFE: 2}
"""Most serious first."""
HOLDS_MESSAGES = frozenset({engine.QUEUE, engine.VHOST})
"""Every queue we declare can hold messages (input, wait tier, error, plain); a vhost holds its queues."""
GRANTS = frozenset({engine.PERMISSIONS, engine.TOPIC_PERMISSIONS, engine.USER})


def risk(step: Step) -> str:
    """data loss: a queue or vhost deleted (unless retained on the broker) or replaced; access: a grant
    created, moved or widened; safe: everything else (policies, exchanges, bindings, revocations)."""
    if step.type in HOLDS_MESSAGES and (step.op == "replace" or (step.op == "delete" and not step.retain_on_delete)):
        return DATA_LOSS
    if step.type in GRANTS and (step.op in ("create", "replace") or (step.op == "update" and widens(step))):
        return ACCESS
    return SAFE
