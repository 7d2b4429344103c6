"""The path guards on real brokers (3.10.8 and 4.3.6): nothing on a retry path is deleted while anything on it holds
a message (issue 31, docs/guard.md "The path guard").

Each change is applied the way the engine schedules `pulumi up` (tests/support/mirror.py `apply_update`): creates,
updates and replacements in dependency order, a failed step stopping only what waits for it (everything else runs,
the worst case), deletions only after every other step succeeded, dependents first. The program's own hooks
(components/pulumi/guard.py) run where the engine calls them (tests/support/hooks.py), reading the broker with the
provider's settings as `pulumi up` hands them over. That the engine calls them is not verified here (no Pulumi CLI).

For each way a change can delete a part of a retry path while a message waits on it, the change is refused before
anything is touched: every object the stack had declared reads back as declared (`read_back`), and every message is
still there. Once the path is drained (waits expire back into their queue, consumers settle them), the same change
goes through. A path that holds nothing is deleted in one apply.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pika
import pytest

from components.model import naming
from components.pulumi.guard import GuardError, queue_key
from rabbitmq_retry_client.levels import delay_exchange, delay_routing_key
from rabbitmq_retry_client.strategies import behaviour_of
from tests.support.admin import wait_for
from tests.support.amqp import channel, drain, message_counts
from tests.support.hooks import ProgramHooks
from tests.support.mirror import Broker, apply, apply_update, esc, get, read_back
from tests.support.retrying import publish_ids
from tests.support.stack import Stack, record_stack, stack_vhost
from tools.lib import engine

WAIT = "10s"
"""Longer than it takes to apply a refused change: what waits in a tier is still there when the guard reads it."""
RETURN_S = 30.0
"""Bound for a wait of WAIT to expire back into its queue, or for a shovel to move a few messages (eventual)."""
HELD = 3


@pytest.fixture
def vhost(broker: Broker, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    with stack_vhost(broker, monkeypatch, "pg") as name:
        yield name


def tiers(name: str, delays: tuple[str, ...] = (WAIT,), queue_type: str = "classic", bound: bool = True
          ) -> dict[str, Any]:
    return {"name": name, "type": queue_type, **({"bindings": [{"exchange": "in"}]} if bound else {}),
            "retry": {"delays": list(delays), "max_retries": 3}}


def levels(name: str) -> dict[str, Any]:
    return {"name": name, "type": "quorum", "bindings": [{"exchange": "in"}], "retry": {
        "strategy": "levels", "max_retries": 3, "backoff": {"initial": "1s", "multiplier": 2, "max": "16s",
                                                            "jitter": 0}}}


def stack_config(*queues: dict[str, Any], migrations: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    config: dict[str, Any] = {"exchanges": [{"name": "in", "type": "fanout"}], "queues": list(queues)}
    if any(q["retry"].get("strategy") == "levels" for q in queues):
        config["delay_levels"] = {"unit": "1s", "max_delay": "16s"}
    if migrations:
        config["migrations"] = migrations
    return config


def wait_in_tier(broker: Broker, vhost: str, contract: dict[str, Any], tier: int, count: int = HELD) -> None:
    """`count` messages retried as a consumer retries attempt `tier`: they wait in wait tier `tier`."""
    exchange, key, _ = behaviour_of(contract).retry_route(contract, tier)
    with channel(broker, vhost) as opened:
        for i in range(count):
            opened.basic_publish(exchange, key, f"w{tier}-{i}".encode(), pika.BasicProperties(
                delivery_mode=2, message_id=f"w{tier}-{i}", headers={contract["attempt_header"]: tier}),
                mandatory=True)


def wait_in_levels(broker: Broker, vhost: str, contract: dict[str, Any], delay_ms: int, count: int = HELD) -> None:
    """`count` copies of a levels retry of `delay_ms`: they wait in the vhost's shared delay levels."""
    with channel(broker, vhost) as opened:
        for i in range(count):
            opened.basic_publish(delay_exchange(contract, delay_ms), delay_routing_key(contract, delay_ms),
                                 f"l-{i}".encode(), pika.BasicProperties(
                                     delivery_mode=2, message_id=f"l-{i}", headers={contract["attempt_header"]: 1}),
                                 mandatory=True)


def held(broker: Broker, vhost: str, queues: set[str]) -> int:
    """Ready messages in every queue of `queues` that exists (a passive declare each)."""
    present = {q for q in queues if get(broker, f"queues/{esc(vhost)}/{esc(q)}") is not None}
    return sum(message_counts(broker, vhost, sorted(present)).values())


def returned(broker: Broker, vhost: str, queue: str, count: int = HELD) -> list[str]:
    """Wait until `count` messages are back in `queue` (their waits expired), then consume them: the path drained."""
    wait_for(lambda: message_counts(broker, vhost, [queue])[queue] >= count, RETURN_S,
             f"{count} messages back in {queue}", interval=0.25)
    return sorted(str(p.message_id) for p, _ in drain(broker, vhost, queue))


def refused(broker: Broker, before: Stack, after: Stack, hooks: ProgramHooks) -> str:
    """Apply before → after, expect the path guard's refusal, and check that nothing was touched: no queue was
    asked about (none was reached), and every object `before` declared reads back as declared."""
    with pytest.raises(GuardError) as refusal:
        apply_update(broker, before.resources, after.resources, hooks.before_delete, hooks.before_update)
    assert [event for event, _ in hooks.path_guards_run()][:1] in (["before_update"], ["before_delete"])
    assert hooks.queues_checked() == [], "the engine reached a queue: something of the path was already deleted"
    assert read_back(broker, before.resources) == [], "a part of the stack was touched by the refused update"
    return str(refusal.value)


def applied(broker: Broker, before: Stack, after: Stack, delete_with_messages: tuple[str, ...] = ()) -> ProgramHooks:
    hooks = ProgramHooks(broker, delete_with_messages)
    apply_update(broker, before.resources, after.resources, hooks.before_delete, hooks.before_update)
    assert read_back(broker, after.resources) == []
    return hooks


# ---------------------------------------------------------------- a retire applied before drained


def retire_steps(broker: Broker, vhost: str) -> tuple[Stack, Stack, Stack, Stack]:
    """orders (classic, one WAIT tier) → orders.v2: before, step move with the shovel user unable to read (nothing
    moves yet), step move, step retire."""
    entry = {"name": "orders-moves", "move": {"from": "orders", "to": "orders.v2"}}
    before = record_stack(broker, vhost, stack_config(tiers("orders")))
    moving = record_stack(broker, vhost, stack_config(tiers("orders", bound=False), tiers("orders.v2"),
                                                      migrations=[{**entry, "step": "move"}]))
    blocked = Stack(moving.config, [r for r in moving.resources if r.type != engine.PERMISSIONS], moving.contracts)
    retiring = record_stack(broker, vhost, stack_config(tiers("orders.v2"), migrations=[{**entry, "step": "retire"}]))
    return before, blocked, moving, retiring


@pytest.mark.parametrize("where", ["wait tier", "error queue", "input queue"])
def test_a_retire_before_drained_is_refused_with_the_whole_path_in_place_and_goes_through_once_moved(
        broker: Broker, vhost: str, where: str):
    before, blocked, moving, retiring = retire_steps(broker, vhost)
    apply(broker, before.resources)
    apply_update(broker, before.resources, blocked.resources)
    contract = before.contracts["orders"]
    holding = {"wait tier": "orders.wait.1", "error queue": "orders.error", "input queue": "orders"}[where]
    if where == "wait tier":
        wait_in_tier(broker, vhost, contract, 1)
    else:
        publish_ids(broker, vhost, "", [f"h-{i}" for i in range(HELD)], routing_key=holding)  # step move unbound it
    old_path = before.queues()

    why = refused(broker, blocked, retiring, hooks := ProgramHooks(broker))
    assert f'the retry path of "orders": "{holding}" holds {HELD} messages' in why, why
    assert hooks.path_guards_run()[0][0] == "before_update"
    assert held(broker, vhost, old_path) == HELD

    # The migration goes on as documented: step move with the shovel able to read moves everything, then retire.
    apply(broker, moving.resources)
    successor = "orders.v2.error" if where == "error queue" else "orders.v2"
    wait_for(lambda: held(broker, vhost, old_path) == 0 and message_counts(broker, vhost, [successor])[successor]
             == HELD, RETURN_S + 30, "the shovels to move every message", interval=0.5)
    applied(broker, moving, retiring)
    assert all(get(broker, f"queues/{esc(vhost)}/{esc(q)}") is None for q in old_path)
    assert len(drain(broker, vhost, successor)) == HELD


# ---------------------------------------------------------------- changes without a migration


def test_a_queue_removed_with_retries_waiting_is_refused_even_with_its_input_queue_waived(broker: Broker, vhost: str):
    before = record_stack(broker, vhost, stack_config(tiers("orders"), tiers("invoices")))
    after = record_stack(broker, vhost, stack_config(tiers("invoices")))
    apply(broker, before.resources)
    wait_in_tier(broker, vhost, before.contracts["orders"], 1)

    why = refused(broker, before, after, ProgramHooks(broker, [queue_key(vhost, "orders")]))
    assert f'"orders.wait.1" holds {HELD} messages' in why and "delete_with_messages" in why

    assert returned(broker, vhost, "orders") == [f"w1-{i}" for i in range(HELD)]  # none lost; consumed: drained
    applied(broker, before, after)
    assert get(broker, f"queues/{esc(vhost)}/orders.wait.1") is None
    assert get(broker, f"queues/{esc(vhost)}/invoices.wait.1") is not None


def test_the_escape_hatch_must_name_every_holding_queue_and_then_drops_the_path_at_once(broker: Broker, vhost: str):
    before = record_stack(broker, vhost, stack_config(tiers("orders")))
    after = record_stack(broker, vhost, stack_config())
    apply(broker, before.resources)
    wait_in_tier(broker, vhost, before.contracts["orders"], 1)
    publish_ids(broker, vhost, "", ["parked"], routing_key="orders.error")

    why = refused(broker, before, after, ProgramHooks(broker, [queue_key(vhost, "orders.wait.1")]))
    assert '"orders.error" holds 1 message' in why and "orders.wait.1" not in why
    applied(broker, before, after, (queue_key(vhost, "orders.wait.1"), queue_key(vhost, "orders.error")))
    assert all(get(broker, f"queues/{esc(vhost)}/{esc(q)}") is None for q in before.queues())


@pytest.mark.parametrize(("before_queue", "after_queue", "tier"), [
    (tiers("orders", (WAIT, "20s")), tiers("orders", (WAIT,)), 2),
    (tiers("orders", queue_type="quorum"), levels("orders"), 1),
], ids=["a tier removed", "the strategy switched without a migration"])
def test_a_change_that_deletes_a_wait_tier_holding_messages_is_refused(
        broker: Broker, vhost: str, before_queue: dict[str, Any], after_queue: dict[str, Any], tier: int):
    before = record_stack(broker, vhost, stack_config(before_queue))
    after = record_stack(broker, vhost, stack_config(after_queue))
    apply(broker, before.resources)
    wait_in_tier(broker, vhost, before.contracts["orders"], tier)

    why = refused(broker, before, after, ProgramHooks(broker))
    assert f'"orders.wait.{tier}" holds {HELD} messages' in why

    assert returned(broker, vhost, "orders") == [f"w{tier}-{i}" for i in range(HELD)]
    applied(broker, before, after)
    assert get(broker, f"queues/{esc(vhost)}/orders.wait.{tier}") is None


def test_a_levels_queue_removed_while_copies_wait_in_the_shared_levels_is_refused(broker: Broker, vhost: str):
    before = record_stack(broker, vhost, stack_config(levels("orders"), levels("invoices")))
    after = record_stack(broker, vhost, stack_config(levels("invoices")))
    apply(broker, before.resources)
    wait_in_levels(broker, vhost, before.contracts["orders"], 8000)
    level_queues = {r.inputs["name"] for r in before.resources if r.type == engine.QUEUE
                    and r.inputs["name"] not in ("orders", "orders.error", "invoices", "invoices.error")}
    assert level_queues, "the vhost declares no delay level"

    why = refused(broker, before, after, ProgramHooks(broker))
    assert 'the retry path of "orders"' in why and any(f'"{q}" holds' in why for q in level_queues), why

    assert returned(broker, vhost, "orders") == [f"l-{i}" for i in range(HELD)]
    applied(broker, before, after)
    assert get(broker, f"queues/{esc(vhost)}/orders") is None
    assert all(get(broker, f"queues/{esc(vhost)}/{esc(q)}") is not None for q in level_queues)  # invoices' own


def test_a_component_removed_with_retries_waiting_is_refused_by_its_removal_guard(broker: Broker, vhost: str):
    before = record_stack(broker, vhost, stack_config(tiers("orders")))
    nothing = Stack({}, [], {})
    apply(broker, before.resources)
    wait_in_tier(broker, vhost, before.contracts["orders"], 1)

    why = refused(broker, before, nothing, hooks := ProgramHooks(broker))
    assert hooks.path_guards_run() == [("before_delete", f"{vhost}-{naming.REMOVAL_GUARD_KEY}")], \
        hooks.path_guards_run()
    assert f'"orders.wait.1" holds {HELD} messages' in why

    assert returned(broker, vhost, "orders") == [f"w1-{i}" for i in range(HELD)]
    hooks = ProgramHooks(broker)
    apply_update(broker, before.resources, nothing.resources, hooks.before_delete, hooks.before_update)
    assert get(broker, f"vhosts/{esc(vhost)}") is None


# ---------------------------------------------------------------- and the reverse


def test_an_empty_path_is_deleted_in_one_apply(broker: Broker, vhost: str):
    before = record_stack(broker, vhost, stack_config(tiers("orders", (WAIT, "20s")), tiers("invoices")))
    after = record_stack(broker, vhost, stack_config(tiers("invoices")))
    apply(broker, before.resources)

    hooks = applied(broker, before, after)
    assert [event for event, _ in hooks.path_guards_run()] == ["before_update"]
    assert sorted(hooks.queues_checked()) == sorted(before.queues() - after.queues())
    assert all(get(broker, f"queues/{esc(vhost)}/{esc(q)}") is None for q in before.queues() - after.queues())
