"""The risk of each change a review lists, most serious first: fails (`pulumi up` stops halfway), data loss,
access, contract (running consumers of the old retry contract break), protection (a safeguard turned off), or
safe."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from components.strategies import STRATEGIES
from components.strategies.common import REDEPLOY, contract_number
from rabbitmq_retry_client.contract import strategy_of
from tools.lib import engine
from tools.lib.engine import Step
from tools.lib.permissions import NO_PLAN, Sides, widens

FAILS, DATA_LOSS, ACCESS, CONTRACT, PROTECTION, SAFE = "fails", "data loss", "access", "contract", "protection", "safe"
ORDER = {FAILS: 0, DATA_LOSS: 1, ACCESS: 2, CONTRACT: 3, PROTECTION: 4, SAFE: 5}
"""Most serious first."""
MUST_SEE = frozenset({FAILS, DATA_LOSS, ACCESS, CONTRACT, PROTECTION})
"""Rows a review never groups into a count or drops, whatever its length."""
HOLDS_MESSAGES = frozenset({engine.QUEUE, engine.VHOST})
"""Every queue we declare can hold messages (input, wait tier, error, plain); a vhost holds its queues."""
GRANTS = frozenset({engine.PERMISSIONS, engine.TOPIC_PERMISSIONS, engine.USER})


def fails_halfway(step: Step, vhost_deleted: bool = False) -> bool:
    """A retained (retain_on_delete) queue replaced under its own name in a vhost that stays: `pulumi up` does not
    delete it, so creating it again with other settings fails with 400 "inequivalent arg" after the replacements
    before it (tests/broker/test_retained_error_queues.py)."""
    old, new = step.old or {}, step.new or {}
    return (step.op == "replace" and step.type == engine.QUEUE and step.retain_on_delete and not vhost_deleted
            and (old.get("name"), old.get("vhost")) == (new.get("name"), new.get("vhost")))


def password_changed(step: Step) -> bool:
    """A user's password updated: every client still using the old one is refused at its next connection."""
    return step.type == engine.USER and step.op == "update" and "password" in step.changed


def risk(step: Step, vhost_deleted: bool = False, sides: Sides = NO_PLAN) -> str:
    """fails: see `fails_halfway`; data loss: a queue or vhost deleted or replaced (a deleted queue retained on
    the broker is not lost, unless `vhost_deleted`: deleting its vhost deletes it); access: a grant created,
    moved or widened, or a password changed (its clients are locked out); safe: everything else (policies,
    exchanges, bindings, revocations). `sides`: what each side's plan knew of the resource, whose grants say which
    names a permission allows (`permissions.widens`)."""
    if fails_halfway(step, vhost_deleted):
        return FAILS
    if step.type in HOLDS_MESSAGES and (step.op == "replace" or (
            step.op == "delete" and (not step.retain_on_delete or vhost_deleted))):
        return DATA_LOSS
    if step.type in GRANTS and (step.op in ("create", "replace") or (step.op == "update" and widens(step, sides))):
        return ACCESS
    if password_changed(step):
        return ACCESS
    return SAFE


def option_risk(resource_type: str, turned_on: bool) -> str:
    """protection: `protect` or `retain_on_delete` turned off on something that holds messages (the next
    deletion or replacement goes through, and takes the messages with it); safe otherwise."""
    return PROTECTION if resource_type in HOLDS_MESSAGES and not turned_on else SAFE


NOT_CONSUMER_FACING = frozenset({"vhost", "queue", "queue_type", "max_retries", "delivery_limit", "migration"})
"""Contract fields every strategy has that are judged below (`max_retries`), or that a consumer does not act on:
a delivery limit counts redeliveries, which a retry never makes, except a `native` one, whose limit the broker
applies; a migration's steps (`migration`) are the review's Migrations section, and a consumer on either queue
keeps working through them. Each strategy's own fields are its module's (`REVIEWED_CONTRACT_KEYS`,
`contract_breaks`)."""
SHARED_BREAKS = {
    "error_exchange": "error exchange {old} → {new}: consumers still publishing parked messages to {old} fail once it "
                      "is deleted (channel error 404 NOT_FOUND)",
    "attempt_header": "attempt header {old} → {new}: consumers on the old contract read no attempt count from messages "
                      "the new ones retried (and the reverse), so those retry from zero, past max_retries",
    "error_queue": "error queue {old} → {new}: whatever reads parked messages from {old} finds no new ones"}
"""Contract fields of every strategy (still compared when the strategy changes), each with how a change of it breaks
consumers on the old contract; a change of any other field means REDEPLOY."""


def contract_breaks(old: Mapping[str, Any], new: Mapping[str, Any],
                    kept: Mapping[str, str] | None = None) -> list[str]:
    """How consumers still running against the `old` retry contract of a queue break under `new`, one
    sentence each ([] when they don't). Consumers read the contract when they start: until every one is
    redeployed, old and new run side by side. A switch of strategy is judged here; a change within one strategy
    of its own fields by that strategy's module. `kept`: what a migration in step drain still declares although
    the contract left it, by name, with the migration's name (`Strategy.contract_breaks`)."""
    breaks = []
    reviewed: frozenset[str] = frozenset()
    if strategy_of(old) != strategy_of(new):
        breaks.append(f"strategy {strategy_of(old)} → {strategy_of(new)}: consumers on the old contract keep retrying "
                      f"the {strategy_of(old)} way, which this queue no longer supports (their retries fail, skip the "
                      "wait or are parked at once)")
        old = {k: v for k, v in old.items() if k in SHARED_BREAKS}
        new = {k: v for k, v in new.items() if k in SHARED_BREAKS}
    else:
        strategy = STRATEGIES[strategy_of(new)]
        breaks += strategy.contract_breaks(old, new, kept)
        reviewed = strategy.REVIEWED_CONTRACT_KEYS
    before, after = contract_number(old.get("max_retries")), contract_number(new.get("max_retries"))
    if before is not None and after is not None and after < before:
        breaks.append(f"max_retries {before:g} → {after:g}: consumers on the old contract retry up to "
                      f"{before:g} times; once they take the new one, messages already retried {after:g} or "
                      "more times are parked at their next failure")
    for key in sorted(set(old) | set(new)):
        if key in NOT_CONSUMER_FACING or key in reviewed or old.get(key) == new.get(key):
            continue
        breaks.append(SHARED_BREAKS[key].format(old=old.get(key), new=new.get(key)) if key in SHARED_BREAKS
                      else f"{key} {old.get(key)} → {new.get(key)}: {REDEPLOY}")
    return breaks
