"""The risk of each change a review lists, most serious first: fails (`pulumi up` stops halfway), data loss,
access, contract (running consumers of the old retry contract break), protection (a safeguard turned off), or
safe."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rabbitmq_retry_client.contract import strategy_of
from tools.lib import engine
from tools.lib.engine import Step
from tools.lib.permissions import widens

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


def risk(step: Step, vhost_deleted: bool = False) -> str:
    """fails: see `fails_halfway`; data loss: a queue or vhost deleted or replaced (a deleted queue retained on
    the broker is not lost, unless `vhost_deleted`: deleting its vhost deletes it); access: a grant created,
    moved or widened, or a password changed (its clients are locked out); safe: everything else (policies,
    exchanges, bindings, revocations)."""
    if fails_halfway(step, vhost_deleted):
        return FAILS
    if step.type in HOLDS_MESSAGES and (step.op == "replace" or (
            step.op == "delete" and (not step.retain_on_delete or vhost_deleted))):
        return DATA_LOSS
    if step.type in GRANTS and (step.op in ("create", "replace") or (step.op == "update" and widens(step))):
        return ACCESS
    if password_changed(step):
        return ACCESS
    return SAFE


def option_risk(resource_type: str, turned_on: bool) -> str:
    """protection: `protect` or `retain_on_delete` turned off on something that holds messages (the next
    deletion or replacement goes through, and takes the messages with it); safe otherwise."""
    return PROTECTION if resource_type in HOLDS_MESSAGES and not turned_on else SAFE


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _fmt_ms(value: Any) -> str:
    number = _number(value)
    return f"{number:g} ms" if number is not None else str(value)


NOT_CONSUMER_FACING = frozenset({"vhost", "queue", "queue_type", "tiers", "reject_routes_to", "max_retries",
                                 "delivery_limit", "min_delay_ms", "max_delay_ms", "backoff", "delay_levels",
                                 "routing_key_format", "delay_exchanges"})
"""Contract fields handled above, or that a consumer does not act on: the broker dead-letters a reject to
the first tier itself, and a delivery limit counts redeliveries, which retrying through tiers never makes;
`native` delays are the broker's; a `levels` consumer keeps its own back-off (any delay reaches its queue),
caps a delay at its old `delay_levels` (they still exist when there are more) and reads `max_delay_ms` and the
key's description nowhere; `delay_exchanges` are the levels up to `delay_exchange`, whose move is compared above."""
NAMES = {"retry_exchange": "retry exchange", "error_exchange": "error exchange", "error_queue": "error queue",
         "attempt_header": "attempt header", "delay_exchange": "delay exchange", "delay_unit_ms": "delay unit"}
SHARED_KEYS = frozenset({"error_exchange", "error_queue", "attempt_header"})
"""Contract fields of every strategy: still compared when the strategy changes."""


def _level(exchange: Any) -> int | None:
    """k of a delay level's exchange `rabbitmq-retry.delay.<k>`."""
    number = str(exchange).rsplit(".", 1)[-1]
    return int(number) if number.isdigit() else None


def _delay_exchange_break(old: Mapping[str, Any], new: Mapping[str, Any]) -> str | None:
    """`levels`: the top level moved. Fewer levels delete the old top; more keep it (a lower level now, which a
    consumer's application user may still write: it is granted every level), so nothing breaks."""
    before, after = old.get("delay_exchange"), new.get("delay_exchange")
    level, levels = _level(before), _number(new.get("delay_levels"))
    if level is None or levels is None or level >= levels:
        return (f"delay exchange {before} → {after}: consumers still publishing delayed copies to {before} fail once "
                "it is deleted (channel error 404 NOT_FOUND)")
    return None


def contract_breaks(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    """How consumers still running against the `old` retry contract of a queue break under `new`, one
    sentence each ([] when they don't). Consumers read the contract when they start: until every one is
    redeployed, old and new run side by side."""
    breaks = []
    if strategy_of(old) != strategy_of(new):
        breaks.append(f"strategy {strategy_of(old)} → {strategy_of(new)}: consumers on the old contract keep retrying "
                      f"the {strategy_of(old)} way, which this queue no longer supports (their retries fail, skip the "
                      "wait or are parked at once)")
        old = {k: v for k, v in old.items() if k in SHARED_KEYS}
        new = {k: v for k, v in new.items() if k in SHARED_KEYS}
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
        elif key == "delay_exchange" and old.get(key) is not None:
            if moved := _delay_exchange_break(old, new):
                breaks.append(moved)
        elif key == "delay_unit_ms" and (_number(old.get(key)) or 0) > 0 and (_number(new.get(key)) or 0) > 0:
            ratio = (_number(new.get(key)) or 0) / (_number(old.get(key)) or 1)
            breaks.append(f"{name} {_fmt_ms(old.get(key))} → {_fmt_ms(new.get(key))}: consumers on the old contract "
                          f"count delays in units of {_fmt_ms(old.get(key))}, which the levels now hold "
                          f"{_fmt_ms(new.get(key))} each: their retries wait {ratio:g} times as long until they are "
                          "redeployed")
        elif key == "error_queue":
            breaks.append(f"{name} {old.get(key)} → {new.get(key)}: whatever reads parked messages from "
                          f"{old.get(key)} finds no new ones")
        else:
            breaks.append(f"{name} {old.get(key)} → {new.get(key)}: consumers written for the old value must be "
                          "redeployed before this is applied")
    return breaks
