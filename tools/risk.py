"""The risk of each change a review lists, most serious first: data loss, access, contract (running
consumers of the old retry contract break), protection (a safeguard turned off), or safe."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tools import engine
from tools.engine import Step
from tools.permissions import widens

DATA_LOSS, ACCESS, CONTRACT, PROTECTION, SAFE = "data loss", "access", "contract", "protection", "safe"
ORDER = {DATA_LOSS: 0, ACCESS: 1, CONTRACT: 2, PROTECTION: 3, SAFE: 4}
"""Most serious first."""
MUST_SEE = frozenset({DATA_LOSS, ACCESS, CONTRACT, PROTECTION})
"""Rows a review never groups into a count or drops, whatever its length."""
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


def option_risk(resource_type: str, turned_on: bool) -> str:
    """protection: `protect` or `retain_on_delete` turned off on something that holds messages (the next
    deletion or replacement goes through, and takes the messages with it); safe otherwise."""
    return PROTECTION if resource_type in HOLDS_MESSAGES and not turned_on else SAFE


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


NOT_CONSUMER_FACING = frozenset({"vhost", "queue", "queue_type", "tiers", "reject_routes_to", "max_retries",
                                 "delivery_limit"})
"""Contract fields handled above, or that a consumer does not act on: the broker dead-letters a reject to
the first tier itself, and a delivery limit counts redeliveries, which retrying through tiers never makes."""
NAMES = {"retry_exchange": "retry exchange", "error_exchange": "error exchange", "error_queue": "error queue",
         "attempt_header": "attempt header"}


def contract_breaks(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    """How consumers still running against the `old` retry contract of a queue break under `new`, one
    sentence each ([] when they don't). Consumers read the contract when they start: until every one is
    redeployed, old and new run side by side."""
    breaks = []
    new_keys = {t["routing_key"] for t in new.get("tiers", [])}
    for tier in old.get("tiers", []):
        if tier["routing_key"] not in new_keys:
            breaks.append(f'tier {tier["routing_key"]} removed: consumers in republish mode that still publish '
                          f'retries with routing key {tier["routing_key"]} to {new.get("retry_exchange")} lose '
                          "those messages (no queue is bound to that key; the exchange drops them)")
    before, after = _number(old.get("max_retries")), _number(new.get("max_retries"))
    if before is not None and after is not None and after < before:
        breaks.append(f"max_retries {before:g} → {after:g}: consumers on the old contract retry up to "
                      f"{before:g} times; once they take the new one, messages already retried {after:g} or "
                      "more times are parked at their next failure")
    for key in sorted(set(old) | set(new)):
        if key in NOT_CONSUMER_FACING or old.get(key) == new.get(key):
            continue
        name = NAMES.get(key, key)
        if key in ("retry_exchange", "error_exchange"):
            what = ("retries" if key == "retry_exchange" else "parked messages")
            breaks.append(f"{name} {old.get(key)} → {new.get(key)}: consumers still publishing {what} to "
                          f"{old.get(key)} fail once it is deleted (channel error 404 NOT_FOUND)")
        elif key == "attempt_header":
            breaks.append(f"{name} {old.get(key)} → {new.get(key)}: consumers on the old contract read no attempt "
                          "count from messages the new ones retried (and the reverse), so those retry from zero, "
                          "past max_retries")
        elif key == "error_queue":
            breaks.append(f"{name} {old.get(key)} → {new.get(key)}: whatever reads parked messages from "
                          f"{old.get(key)} finds no new ones")
        else:
            breaks.append(f"{name} {old.get(key)} → {new.get(key)}: consumers written for the old value must be "
                          "redeployed before this is applied")
    return breaks
