"""Strategy `levels`: a delay per message through a vhost's shared binary delay levels, from config to plan,
routing, checks, permissions, contract and the components under mocks (docs/strategies.md, docs/config.md and
docs/contract.md).

Level k is a topic exchange and a queue `rabbitmq-retry.delay.<k>` holding a message `unit × 2^k`; the routing
key always carries 28 bit words, so raising `max_delay` only adds levels on top and never moves the bit a
waiting message is routed by."""

from __future__ import annotations

import copy
import json
import math
import re
from typing import Any

import pytest

from components.config.load import load_delay_levels, load_queue, load_stack_config, load_vhost
from components.model import naming
from components.model.plan_types import DelayLevelsPlan, VhostPlan, exact_names
from components.model.problems import ConfigError
from components.model.stack_config import MAX_MESSAGE_TTL_MS, DelayLevels
from components.plan.checks import _graph, _topic_matches, check_vhost, route, stale_policies
from components.plan.effective import winners
from components.plan.planner import plan_retryable, plan_vhost
from components.strategies.levels import Backoff, LevelsRetry, plan_delay_levels
from rabbitmq_retry_client import levels as client_levels
from rabbitmq_retry_client.contract import ContractError, load_contract, validate
from tests.conftest import vhost_config
from tests.support.problems import config_problems, messages

LEVELS_RETRY: dict[str, Any] = {"strategy": "levels", "max_retries": 6, "backoff": {"initial": "1s", "max": "10s"}}
SMALL = {"unit": "1s", "max_delay": "15s"}
"""Four levels (1s, 2s, 4s, 8s): every delay of 0 … 15 units can be walked through."""


def levels_queue(name: str = "orders", **retry: Any) -> dict[str, Any]:
    return {"name": name, "bindings": [{"exchange": "events", "routing_key": f"{name}.created"}],
            "retry": {**copy.deepcopy(LEVELS_RETRY), **retry}}


def levels_vhost(queues: list[dict[str, Any]] | None = None, delay_levels: dict[str, Any] | None = None,
                 **vhost: Any) -> dict[str, Any]:
    """The conftest vhost (events exchange, plain queue `audit`) with `orders` retrying through the levels."""
    config = vhost_config(**vhost)
    config["queues"] = [*(queues if queues is not None else [levels_queue()]), config["queues"][1]]
    if delay_levels is not None:
        config["delay_levels"] = delay_levels
    return config


def stack(vhost: dict[str, Any], **top: Any) -> dict[str, Any]:
    return {"vhosts": [vhost], **top}


def planned(vhost: dict[str, Any], **top: Any) -> VhostPlan:
    return plan_vhost(load_stack_config(stack(vhost, **top)).vhosts[0], "vhosts[0]")


def levels_plan(unit: str = "1s", max_delay: str = "1d", queue_type: str = "quorum") -> DelayLevelsPlan:
    return plan_delay_levels(load_delay_levels({"unit": unit, "max_delay": max_delay, "type": queue_type},
                                               "delay_levels"), path="delay_levels")


def bits_of(units: int) -> list[int]:
    """The levels a delay of `units` waits in, highest first."""
    return [k for k in reversed(range(units.bit_length())) if units >> k & 1]


# --- config: every refusal with its key path ------------------------------------------------------------------

Q = "vhosts[shop].queues[orders]"


def with_backoff(**backoff: Any) -> dict[str, Any]:
    return stack(levels_vhost([levels_queue(backoff={**LEVELS_RETRY["backoff"], **backoff})]))


@pytest.mark.parametrize(("raw", "expected"), [
    pytest.param(stack(levels_vhost([{**levels_queue(), "retry": {"strategy": "levels"}}])),
                 [(f"{Q}.retry.max_retries", "missing; strategy levels needs it (the retries before a message is "
                                             "parked)")], id="max-retries-missing"),
    pytest.param(with_backoff(initial="500ms"),
                 [(f"{Q}.retry.backoff.initial", "500ms is shorter than vhosts[shop].delay_levels.unit (1s), the "
                                                 "shortest delay the levels make; raise initial or lower the unit")],
                 id="initial-below-unit"),
    pytest.param(stack(levels_vhost([levels_queue(backoff={"max": "25h"})])),
                 [(f"{Q}.retry.backoff.max", "25h is longer than vhosts[shop].delay_levels.max_delay (24h), the "
                                             "longest delay the levels hold; lower max or raise max_delay")],
                 id="max-over-max-delay"),
    pytest.param(stack(levels_vhost([levels_queue(backoff={"max": "16s", "jitter": 0.5})], SMALL)),
                 [(f"{Q}.retry.backoff.max", "16s is longer than vhosts[shop].delay_levels.max_delay (15s), "
                                             "the longest delay the levels hold; lower max or raise max_delay")],
                 id="max-over-small-levels"),
    pytest.param(with_backoff(multiplier=0.5),
                 [(f"{Q}.retry.backoff.multiplier", "0.5 is out of range (use >= 1)")], id="multiplier-below-1"),
    pytest.param(with_backoff(jitter=1), [(f"{Q}.retry.backoff.jitter", "1 is out of range (use 0 ≤ value < 1)")],
                 id="jitter-1"),
    pytest.param(with_backoff(jitter=-0.1),
                 [(f"{Q}.retry.backoff.jitter", "-0.1 is out of range (use 0 ≤ value < 1)")], id="jitter-negative"),
    pytest.param(with_backoff(jitter="0.2"), [(f"{Q}.retry.backoff.jitter", "expected a number, got '0.2'")],
                 id="jitter-string"),
    pytest.param(with_backoff(initial="10s", max="5s"),
                 [(f"{Q}.retry.backoff.max", "'5s' is shorter than initial '10s'; the delay grows from initial up to "
                                             "max")], id="max-below-initial"),
    pytest.param(with_backoff(maximum="5s"),
                 [(f"{Q}.retry.backoff.maximum", 'unknown key; did you mean "max"? (allowed: initial, multiplier, max, '
                                                 "jitter)")],
                 id="unknown-backoff-key"),
    pytest.param(stack(vhost_config(delay_levels={"unit": "1s"})),
                 [("vhosts[shop].delay_levels", "no queue of this vhost has retry.strategy: levels; remove "
                                             "delay_levels")], id="delay-levels-without-a-levels-queue"),
    pytest.param(stack(levels_vhost(delay_levels={"unit": "10s", "max_delay": "5s"})),
                 [("vhosts[shop].delay_levels.max_delay",
                   "'5s' is shorter than unit '10s'")], id="unit-over-max-delay"),
    pytest.param(stack(levels_vhost(delay_levels={"unit": "1ms", "max_delay": "4d"})),
                 [("vhosts[shop].delay_levels.max_delay", "29 levels of 1ms are more than the 28 a routing key "
                                                          "carries; "
                                                       "raise unit or lower max_delay")], id="29-levels"),
    pytest.param(stack(levels_vhost([levels_queue(backoff={"initial": "3000000000ms", "max": "3000000000ms",
                                                           "jitter": 0})],
                                    {"unit": "3000000000ms", "max_delay": "4000000000ms"})),
                 [("vhosts[shop].delay_levels.max_delay", "the top level would hold messages 100000m, over "
                                                       "RabbitMQ's longest message-ttl (4294967295ms, about 49 "
                                                       "days); lower "
                                                       "max_delay or unit")],
                 id="top-level-ttl-over-2^32-1"),
    pytest.param(stack(levels_vhost(delay_levels={"unit": "1s", "size": 3})),
                 [("vhosts[shop].delay_levels.size",
                   "unknown key (allowed: unit, max_delay, type, quorum_group_size)")],
                 id="unknown-delay-levels-key"),
    pytest.param(stack(levels_vhost(delay_levels={"type": "stream"})),
                 [("vhosts[shop].delay_levels.type",
                   "'stream' is not one of classic, quorum")], id="delay-levels-type"),
    pytest.param(stack(levels_vhost([levels_queue("orders.*.eu")])),
                 [("vhosts[shop].queues[orders.*.eu].name", '"orders.*.eu": a word "*" or "#" would be a wildcard in '
                                                            'the delivery binding of '
                                "strategy levels, which must match this queue only; rename the queue")],
                 id="star-word"),
    pytest.param(stack(levels_vhost([levels_queue("#.orders")])),
                 [("vhosts[shop].queues[#.orders].name", '"#.orders": a word "*" or "#" would be a wildcard in the '
                                                         'delivery binding of '
                                "strategy levels, which must match this queue only; rename the queue")],
                 id="hash-word"),
    pytest.param(stack(levels_vhost([levels_queue("q" * 200)])),
                 [(f"vhosts[shop].queues[{'q' * 200}].name", "200 bytes: with strategy levels the queue's name ends a "
                                                             "routing key after 28 delay "
                                "bits, which leaves 199 bytes; shorten the queue name")], id="name-too-long-for-key"),
    pytest.param(stack(vhost_config(queues=[{"name": "o", "retry": {"delays": ["1s"], "backoff": {}}}])),
                 [("vhosts[shop].queues[o].retry.backoff", "belongs to strategy levels, not tiers; remove it or set "
                                                           "vhosts[shop].queues[o].retry.strategy: levels")],
                 id="backoff-with-tiers"),
    pytest.param(stack(levels_vhost([levels_queue(delays=["1s"])])),
                 [(f"{Q}.retry.delays", f"belongs to strategy tiers, not levels; remove it or set {Q}.retry.strategy: "
                                        "tiers")], id="delays-with-levels"),
])
def test_a_levels_mistake_is_refused_with_its_key_path_and_a_fix(raw, expected):
    assert config_problems(raw) == expected


@pytest.mark.parametrize(("backoff", "delay_levels"), [
    ({"max": "20h"}, None),  # 20h × 1.2 = 1d
    ({"max": "10s", "jitter": 0.5}, SMALL),  # 15s
    ({"max": "15s", "jitter": 0}, SMALL),
    # 3000 × 1.1 is 3300.0000000000005 in floating point: an exact fit must not be refused for it.
    ({"max": "3s", "jitter": 0.1}, {"unit": "1ms", "max_delay": "3300ms"}),
    ({"initial": "1ms", "max": "1ms"}, {"unit": "1ms", "max_delay": "2ms"}),
])
def test_a_backoff_whose_longest_delay_fits_max_delay_exactly_is_accepted(backoff, delay_levels):
    load_stack_config(stack(levels_vhost([levels_queue(backoff=backoff)], delay_levels)))


def test_a_name_with_wildcard_characters_inside_a_word_is_no_wildcard():
    """Only a whole `*` or `#` word is a topic wildcard."""
    load_stack_config(stack(levels_vhost([levels_queue("orders*.eu#")])))


def test_the_longest_name_the_routing_key_leaves_room_for_is_accepted():
    name = "q" * (naming.MAX_NAME_BYTES - 2 * naming.DELAY_WORDS)
    (queue, _) = load_stack_config(stack(levels_vhost([levels_queue(name)]))).vhosts[0].queues
    assert len(naming.delay_routing_key(2**naming.DELAY_WORDS - 1, queue.name)) == naming.MAX_NAME_BYTES


@pytest.mark.parametrize("kind", ["queues", "exchanges", "policies"])
def test_no_config_name_may_take_the_delay_levels_prefix(kind):
    entry = {"queues": {"name": "rabbitmq-retry.delay.x"},
             "exchanges": {"name": "rabbitmq-retry.delay.x", "type": "topic"},
             "policies": {"name": "rabbitmq-retry.delay.x", "pattern": "^audit$", "definition": {"max-length": 1}}}
    config = vhost_config()
    config[kind] = [entry[kind], *config.get(kind, [])]
    singular = {"queues": "queue", "exchanges": "exchange", "policies": "policy"}[kind]
    assert config_problems(stack(config)) == [
        (f"vhosts[shop].{kind}[rabbitmq-retry.delay.x].name", '"rabbitmq-retry.delay.x": the "rabbitmq-retry.delay." '
                                                              'prefix names the shared '
                                      f"delay levels of strategy levels; rename the {singular}")]


def test_the_levels_hold_every_delay_up_to_max_delay_and_no_level_over_the_longest_ttl():
    """A client rounds a delay up to whole units and caps it at `2^levels - 1` units: the levels must reach
    `max_delay` rounded up, or a retry would come early. Their top level may then hold more than `max_delay`,
    but never more than RabbitMQ's longest message-ttl."""
    for unit in (1, 7, 1000, 3_000, 60_000, 86_400_000, 3_000_000_000):
        for max_delay in (unit, unit * 2, unit * 3 // 2, 86_400_000, 4_000_000_000, MAX_MESSAGE_TTL_MS):
            if not unit <= max_delay <= MAX_MESSAGE_TTL_MS:  # durations refuse more
                continue
            written = {"unit": f"{unit}ms", "max_delay": f"{max_delay}ms"}
            try:
                levels = load_delay_levels(written, "delay_levels")
            except ConfigError as error:  # too many levels, or a top level over the longest TTL
                ((_, message),) = error.problems
                assert message.endswith(("raise unit or lower max_delay", "lower max_delay or unit")), message
                continue
            assert unit * (2**levels.levels - 1) >= max_delay
            assert unit * 2 ** (levels.levels - 1) <= MAX_MESSAGE_TTL_MS


def test_a_retry_is_never_cut_short_when_max_delay_is_not_a_whole_number_of_units():
    """Unit 1m, max_delay 90s: a retry of 1m ± 20% may ask for 72s, 2 units; one level (60s) would cut it short."""
    plan = planned(levels_vhost([levels_queue(backoff={"initial": "1m", "max": "1m"})],
                                {"unit": "1m", "max_delay": "90s"}))
    assert plan.delay_levels is not None and plan.delay_levels.config.levels == 2
    contract = validate(plan.retryables[0].contract("shop"))
    units = client_levels.delay_units(contract, 72_000)
    assert units == 2 and trip(plan, units, "orders") == ("orders", 120_000, [1])


def test_the_defaults_are_1s_up_to_1d_in_17_quorum_levels_and_the_backoff_of_the_readme():
    config = load_stack_config(stack(levels_vhost([{**levels_queue(), "retry": {"strategy": "levels",
                                                                                "max_retries": 6}}])))
    vhost = config.vhosts[0]
    assert vhost.delay_levels == DelayLevels(unit_ms=1000, max_delay_ms=86_400_000, queue_type="quorum",
                                             policy_priority=10)
    assert vhost.delay_levels.levels == 17
    retry = vhost.queues[0].retry
    assert isinstance(retry, LevelsRetry)
    assert retry.backoff == Backoff(initial_ms=1000, multiplier=2.0, max_ms=3_600_000, jitter=0.2)
    assert plan_vhost(vhost).retryables[0].delay_levels is vhost.delay_levels
    assert vhost.queues[0].delivery_limit == 20 + 6  # as for tiers: every retry is a new message, not a redelivery


def test_the_levels_take_the_stack_default_queue_type_and_priority_unless_their_own_type_is_set():
    raw = stack(levels_vhost(), defaults={"queue_type": "classic", "policy_priority": 3})
    assert load_stack_config(raw).vhosts[0].delay_levels == DelayLevels(1000, 86_400_000, "classic", 3)
    raw["vhosts"][0]["delay_levels"] = {"type": "quorum"}
    assert load_stack_config(raw).vhosts[0].delay_levels.queue_type == "quorum"


@pytest.mark.parametrize(("unit", "max_delay", "levels"), [
    ("1s", "1d", 17), ("1s", "15s", 4), ("1s", "16s", 5), ("1s", "1s", 1), ("1s", "1999ms", 2), ("1s", "30d", 22),
    ("100ms", "1h", 16), ("1m", "1d", 11), ("1ms", "268435455ms", 28), ("500ms", "49d", 24),
])
def test_the_number_of_levels_follows_from_max_delay_over_unit(unit, max_delay, levels):
    config = load_delay_levels({"unit": unit, "max_delay": max_delay}, "delay_levels")
    assert config.levels == levels == math.ceil(config.max_delay_ms / config.unit_ms).bit_length()
    plan = plan_delay_levels(config)
    assert [q.name for q in plan.level_queues] == [f"rabbitmq-retry.delay.{k}" for k in range(levels)]
    assert plan.top_exchange == f"rabbitmq-retry.delay.{levels - 1}"
    assert config.unit_ms * (2**levels - 1) >= config.max_delay_ms  # every delay up to max_delay fits, rounded up


# --- plan ----------------------------------------------------------------------------------------------------

def test_each_level_dead_letters_to_the_level_below_and_level_0_to_the_delivery_exchange():
    plan = levels_plan("1s", "15s")
    assert [(q.key, q.name, q.role, dict(q.arguments)) for q in plan.queues] == [
        *((f"level-{k}", f"rabbitmq-retry.delay.{k}", "delay", {
            "x-queue-type": "quorum", "x-dead-letter-exchange": below,
            "x-dead-letter-strategy": "at-least-once", "x-overflow": "reject-publish"})
          for k, below in enumerate(["rabbitmq-retry.delay.deliver", "rabbitmq-retry.delay.0",
                                     "rabbitmq-retry.delay.1", "rabbitmq-retry.delay.2"])),
        # Where a copy goes whose queue is gone: it has no consumer and dead-letters nowhere.
        ("undeliverable", "rabbitmq-retry.delay.undeliverable", "error", {"x-queue-type": "quorum"})]
    # No dead-letter routing key: a message keeps the key that spells its delay and its queue.
    assert not any("x-dead-letter-routing-key" in q.arguments for q in plan.queues)


def test_classic_levels_have_no_quorum_dead_lettering():
    plan = levels_plan("1s", "15s", "classic")
    assert [dict(q.arguments) for q in plan.queues][:2] == [
        {"x-queue-type": "classic", "x-dead-letter-exchange": "rabbitmq-retry.delay.deliver"},
        {"x-queue-type": "classic", "x-dead-letter-exchange": "rabbitmq-retry.delay.0"}]


def test_each_level_holds_a_message_unit_times_2_to_the_k_by_an_exactly_anchored_policy():
    plan = levels_plan("250ms", "15s", "classic")
    assert [(p.key, p.name, p.pattern, p.priority, p.apply_to, dict(p.definition), dict(p.sources))
            for p in plan.policies] == [
        (f"level-{k}-policy", f"rabbitmq-retry.delay.{k}", rf"^rabbitmq\-retry\.delay\.{k}$", 10, "queues",
         {"message-ttl": str(250 * 2**k)}, {"message-ttl": "delay_levels.unit"}) for k in range(6)]
    for k, policy in enumerate(plan.policies):
        assert re.search(policy.pattern, f"rabbitmq-retry.delay.{k}")
        assert not re.search(policy.pattern, f"rabbitmq-retry.delay.{k}0")
        assert not re.search(policy.pattern, f"xrabbitmq-retry.delay.{k}")


def test_a_quorum_undeliverable_queue_never_reaches_a_delivery_limit():
    """It dead-letters nowhere, like an error queue: RabbitMQ 4's default limit of 20 would drop a copy that
    crashed readers returned that often. Classic queues have no delivery limit."""
    policy = levels_plan("1s", "15s").policies[-1]
    assert (policy.key, policy.name, policy.pattern, dict(policy.definition), dict(policy.sources)) == (
        "undeliverable-policy", "rabbitmq-retry.delay.undeliverable", r"^rabbitmq\-retry\.delay\.undeliverable$",
        {"delivery-limit": "1000000"}, {"delivery-limit": "delay_levels.type"})
    assert [p.key for p in levels_plan("1s", "15s", "classic").policies] == [f"level-{k}-policy" for k in range(4)]


def test_every_level_and_the_delivery_exchange_are_topic_exchanges():
    plan = levels_plan("1s", "15s")
    assert [(x.key, x.name, x.type, dict(x.arguments)) for x in plan.exchanges] == [
        ("deliver", "rabbitmq-retry.delay.deliver", "topic",
         {"alternate-exchange": "rabbitmq-retry.delay.undeliverable"}),
        *((f"level-{k}-exchange", f"rabbitmq-retry.delay.{k}", "topic", {}) for k in range(4)),
        ("undeliverable-exchange", "rabbitmq-retry.delay.undeliverable", "fanout", {})]


def test_level_k_reads_the_bit_at_word_27_minus_k_and_sends_1_to_its_queue_and_0_one_exchange_down():
    plan = levels_plan("1s", "15s")
    below = ["rabbitmq-retry.delay.deliver", *(f"rabbitmq-retry.delay.{k}" for k in range(3))]
    undeliverable = "rabbitmq-retry.delay.undeliverable"
    assert [(b.key, b.source, b.destination, b.destination_type) for b in plan.bindings] == [
        *(row for k in range(4) for row in (
            (f"level-{k}-wait", f"rabbitmq-retry.delay.{k}", f"rabbitmq-retry.delay.{k}", "queue"),
            (f"level-{k}-pass", f"rabbitmq-retry.delay.{k}", below[k], "exchange"))),
        ("undeliverable-binding", undeliverable, undeliverable, "queue")]
    for binding in plan.bindings[:-1]:
        k, bit = int(binding.source.rsplit(".", 1)[1]), "1" if binding.key.endswith("-wait") else "0"
        # Word 27 - k counted from 0 at the left: level 0 reads the last bit word, level 27 the first.
        assert binding.routing_key.split(".") == ["*"] * (27 - k) + [bit, "#"]


def test_the_delivery_binding_matches_exactly_its_queue_word_for_word():
    plan = plan_retryable(load_queue(levels_queue("orders.billing"), "q"), "q", DelayLevels())
    (delivery,) = [b for b in plan.bindings if b.key == "delivery-binding"]
    assert (delivery.source, delivery.destination, delivery.destination_type) == (
        "rabbitmq-retry.delay.deliver", "orders.billing", "queue")
    assert delivery.routing_key == "*." * 28 + "orders.billing"
    for units in (0, 1, 5, 2**28 - 1):
        assert _topic_matches(delivery.routing_key, naming.delay_routing_key(units, "orders.billing"))
        # `#.orders.billing` would match these; 28 `*` words do not.
        assert not _topic_matches(delivery.routing_key, naming.delay_routing_key(units, "x.orders.billing"))
        assert not _topic_matches(delivery.routing_key, naming.delay_routing_key(units, "orders.billing.x"))
        assert not _topic_matches(delivery.routing_key, naming.delay_routing_key(units, "billing"))


def test_a_levels_queue_owns_its_input_and_error_queue_and_no_tiers():
    plan = plan_retryable(load_queue({**levels_queue(), "type": "classic"}, "q"), "q", DelayLevels())
    assert [(q.key, q.name, dict(q.arguments)) for q in plan.queues] == [
        ("input", "orders", {"x-queue-type": "classic", "x-dead-letter-exchange": "orders.error"}),
        ("error", "orders.error", {"x-queue-type": "classic"})]
    assert [(x.key, x.name, x.type) for x in plan.exchanges] == [("error-exchange", "orders.error", "fanout")]
    assert [b.key for b in plan.bindings] == ["error-binding", "delivery-binding"]
    # Every level: a consumer on the contract of a smaller max_delay publishes to a lower top level.
    assert plan.tiers == () and plan.consumer_exchanges == (*(f"rabbitmq-retry.delay.{k}" for k in range(17)),
                                                            "orders.error")


def test_raising_max_delay_keeps_every_existing_level_identical_and_only_adds_levels_on_top():
    """The core safety property: a message waiting in level k is routed by the same bit, to the same exchange,
    with the same TTL, before and after `max_delay` grows from 1d to 30d."""
    day, month = levels_plan("1s", "1d"), levels_plan("1s", "30d")
    assert (day.config.levels, month.config.levels) == (17, 22)
    for kind in ("queues", "exchanges", "bindings", "policies"):
        before, after = (tuple(e for e in getattr(plan, kind) if not e.key.startswith("undeliverable"))
                         for plan in (day, month))
        assert after[:len(before)] == before, kind  # same key, name, arguments, routing key, TTL
        assert {e.key.split("-")[1] for e in after[len(before):]} == {str(k) for k in range(17, 22)}, kind
    assert len(month.queues) - len(day.queues) == 5 and len(month.bindings) - len(day.bindings) == 10
    # The levels queues themselves do not move either; only their contract names the new top.
    queue = levels_queue(backoff={"max": "10s"})
    plans = [plan_retryable(load_queue(queue, "q"), "q", load_delay_levels({"max_delay": m}, "delay_levels"))
             for m in ("1d", "30d")]
    before, after = ((p.queues, p.exchanges, p.bindings, p.policies) for p in plans)
    assert before == after
    assert [p.delay_exchange for p in plans] == ["rabbitmq-retry.delay.16", "rabbitmq-retry.delay.21"]


def test_lowering_max_delay_removes_top_levels_only_and_a_new_unit_changes_only_the_ttl_policies():
    day, hour = levels_plan("1s", "1d"), levels_plan("1s", "1h")
    assert hour.config.levels == 12 and day.level_queues[:12] == hour.level_queues
    assert day.bindings[:24] == hour.bindings[:24] and day.bindings[-1] == hour.bindings[-1]
    slower = levels_plan("1200ms", "1d")  # 72,000 units: still 17 levels
    assert (slower.queues, slower.exchanges, slower.bindings) == (day.queues, day.exchanges, day.bindings)
    assert [p.definition.get("message-ttl") for p in slower.policies] == [str(1200 * 2**k) for k in range(17)] + [None]


# --- routing -------------------------------------------------------------------------------------------------

ROUTED = ["orders.billing", "x.orders.billing", "billing"]
"""Three levels queues whose names end alike: each delivery binding must still match exactly one."""


def routed_plan(delay_levels: dict[str, Any] | None = None) -> VhostPlan:
    queues = [levels_queue(name, backoff={"max": "10s", "jitter": 0.2}) for name in ROUTED]
    return planned(levels_vhost(queues, SMALL if delay_levels is None else delay_levels))


def trip(plan: VhostPlan, units: int, queue: str, start: str | None = None) -> tuple[str, int, list[int]]:
    """A delayed copy's whole way as the broker moves it: published to `start` (default: the top level), routed
    to one queue,
    held there for that queue's TTL, dead-lettered (same key) to the exchange its arguments name, and so on
    until it reaches a queue without a TTL. (destination, total wait in ms, the levels it waited in)."""
    graph = _graph(plan, ())
    assert plan.delay_levels is not None
    exchange, key = start or plan.delay_levels.top_exchange, naming.delay_routing_key(units, queue)
    waited, levels = 0, []
    for _ in range(naming.DELAY_WORDS + 1):
        reached = route(graph, exchange, key)
        assert reached is not None and len(reached) == 1, (units, queue, exchange, reached)
        (at,) = reached
        if graph.queues[at].role != "delay":
            return at, waited, levels
        policy = winners(graph.policies.matching_queue(graph.queues[at]))[0]
        assert policy is not None
        waited += int(policy.definition["message-ttl"])
        levels.append(int(at.rsplit(".", 1)[1]))
        arguments = graph.queues[at].arguments
        assert "x-dead-letter-routing-key" not in arguments
        exchange = str(arguments["x-dead-letter-exchange"])
    raise AssertionError(f"{units} units for {queue} never left the levels")


def test_every_delay_first_reaches_the_level_of_its_highest_bit_and_zero_reaches_exactly_its_queue():
    plan = routed_plan()
    graph = _graph(plan, ())
    for queue in ROUTED:
        assert route(graph, "rabbitmq-retry.delay.3", naming.delay_routing_key(0, queue)) == {queue}
        for units in range(1, 16):
            assert route(graph, "rabbitmq-retry.delay.3", naming.delay_routing_key(units, queue)) == {
                f"rabbitmq-retry.delay.{units.bit_length() - 1}"}


def test_a_copy_waits_exactly_its_units_and_then_reaches_exactly_its_own_queue():
    plan = routed_plan()
    for queue in ROUTED:
        for units in range(16):
            assert trip(plan, units, queue) == (queue, units * 1000, bits_of(units)), (queue, units)


def test_the_whole_trip_holds_for_17_levels_and_a_unit_that_is_not_a_second():
    plan = routed_plan({"unit": "250ms", "max_delay": "9h"})  # 129,600 units: 17 levels
    assert plan.delay_levels is not None and plan.delay_levels.config.levels == 17
    for units in (0, 1, 2, 3, 1000, 2**16, 2**16 + 1, 86_399, 2**17 - 1):
        assert trip(plan, units, "x.orders.billing") == ("x.orders.billing", units * 250, bits_of(units))


def test_after_max_delay_is_raised_a_copy_routed_by_the_old_levels_still_waits_its_time():
    """A copy that was published to the old top (15s: level 3) before the stack grew to 4 more levels."""
    plan = routed_plan({"unit": "1s", "max_delay": "4m"})
    graph = _graph(plan, ())
    for units in range(16):
        key = naming.delay_routing_key(units, "billing")
        first = route(graph, "rabbitmq-retry.delay.3", key)
        assert first == ({"billing"} if units == 0 else {f"rabbitmq-retry.delay.{units.bit_length() - 1}"})
        assert trip(plan, units, "billing") == ("billing", units * 1000, bits_of(units))


# --- checks --------------------------------------------------------------------------------------------------

def test_a_vhost_with_levels_queues_checks_clean():
    plan = routed_plan()
    assert check_vhost(plan) == [] and stale_policies(plan) == []
    assert check_vhost(planned(levels_vhost())) == []


def operator_policy(pattern: str, **definition: Any) -> dict[str, Any]:
    return {"name": "ops", "pattern": pattern, "definition": definition}


def test_an_operator_policy_ttl_shorter_than_a_level_is_refused_with_its_key_path():
    plan = planned(levels_vhost(delay_levels=SMALL,
                                operator_policies=[operator_policy(r"^rabbitmq-retry\.delay\.[23]$",
                                                                   **{"message-ttl": 3000})]))
    assert messages(check_vhost(plan)) == [
        'vhosts[0].operator_policies[ops].definition.message-ttl: message-ttl 3000 on delay level '
        '"rabbitmq-retry.delay.2" is not its 4s: messages would come back at the wrong time; narrow the '
        'operator policy\'s pattern so that it does not match "rabbitmq-retry.delay.2"',
        'vhosts[0].operator_policies[ops].definition.message-ttl: message-ttl 3000 on delay level '
        '"rabbitmq-retry.delay.3" is not its 8s: messages would come back at the wrong time; narrow the '
        'operator policy\'s pattern so that it does not match "rabbitmq-retry.delay.3"']


def test_an_operator_policy_ttl_longer_than_every_level_changes_nothing():
    plan = planned(levels_vhost(delay_levels=SMALL,
                                operator_policies=[operator_policy("^rabbitmq", **{"message-ttl": 8000})]))
    assert check_vhost(plan) == []


def test_an_operator_policy_expiry_on_a_level_is_refused_with_its_key_path():
    plan = planned(levels_vhost(delay_levels=SMALL,
                                operator_policies=[operator_policy(r"^rabbitmq-retry\.delay\.1$", expires=3_600_000)]))
    assert messages(check_vhost(plan)) == [
        'vhosts[0].operator_policies[ops].definition.expires: expires 3600000 reaches delay level '
        '"rabbitmq-retry.delay.1", which has no consumer: RabbitMQ would delete it with its messages; narrow the '
        'operator policy\'s pattern so that it does not match "rabbitmq-retry.delay.1"']


def test_an_operator_max_length_on_a_classic_level_is_refused_but_a_quorum_level_refuses_publishes():
    """Classic: the default overflow, drop-head, sends the oldest message one level down before its time.
    Quorum levels carry `x-overflow: reject-publish`: a full level makes the publisher (or the dead-lettering,
    at least once) wait instead."""
    capped = [operator_policy(r"^rabbitmq-retry\.delay\.0$", **{"max-length": 1000})]
    classic = planned(levels_vhost(delay_levels={**SMALL, "type": "classic"}, operator_policies=capped))
    assert messages(check_vhost(classic)) == [
        'vhosts[0].operator_policies[ops].definition.max-length: max-length 1000 on delay level '
        '"rabbitmq-retry.delay.0" without overflow reject-publish: when full, RabbitMQ sends the oldest message on '
        'before its delay is over; narrow the operator policy\'s pattern so that it does not match '
        '"rabbitmq-retry.delay.0"']
    assert check_vhost(planned(levels_vhost(delay_levels=SMALL, operator_policies=capped))) == []


def test_a_user_policy_on_a_level_overlaps_the_levels_own_policy():
    plan = planned(levels_vhost(delay_levels=SMALL, policies=[
        {"name": "lazy", "pattern": r"^rabbitmq-retry\.delay\.0$", "priority": 99, "definition": {"max-length": 5}}]))
    assert messages(check_vhost(plan)) == [
        "vhosts[0].policies[lazy] (policy 'lazy') matches 1 queue that has a policy of this stack "
        '(`rabbitmq-retry.delay.0`): RabbitMQ applies only one policy per queue; narrow the pattern to leave them '
        "out, and set what it sets through the queue's own keys (max_length, delivery_limit; message_ttl, "
        "max_length_bytes on a plain queue)",
        # The higher priority wins, and it sets no TTL: the level would hold its messages for ever.
        'vhosts[0].policies[lazy]: message-ttl none on delay level "rabbitmq-retry.delay.0" is not its 1s: '
        'messages would never come back; narrow its pattern so that it does not match "rabbitmq-retry.delay.0"']


def test_a_binding_that_taps_the_delivery_exchange_is_refused():
    """`external: true` lets a config name the delivery exchange: a copy would then reach another queue too."""
    config = levels_vhost(delay_levels=SMALL)
    config["queues"][1]["bindings"].append({"exchange": "rabbitmq-retry.delay.deliver", "external": True,
                                            "routing_key": "#"})
    assert messages(check_vhost(planned(config))) == [
        '"rabbitmq-retry.delay.3" routes a delay of 0 units for "orders" to [\'audit\', \'orders\'] instead of '
        'exactly [\'orders\']']


# --- permissions ---------------------------------------------------------------------------------------------

def test_a_consumer_of_a_levels_queue_writes_the_top_level_and_its_error_exchange_and_reads_its_queue():
    plan = planned(levels_vhost(applications=[{"user": "orders-app", "consumes": ["orders"]}]))
    (grant,) = plan.permissions
    levels = [f"rabbitmq-retry.delay.{k}" for k in range(17)]
    # Every level, not only the top: a consumer still on the contract of a smaller max_delay keeps working.
    assert (grant.configure.regex, grant.write.regex, grant.read.regex) == (
        "^$", exact_names(["orders.error", *levels]), "^(orders)$")
    assert (grant.configure.names, grant.write.names, grant.read.names) == (
        (), tuple(sorted(["orders.error", *levels])), ("orders",))
    assert not re.search(grant.write.regex, "rabbitmq-retry.delay.deliver")  # no way around the delay
    assert [(t.exchange, t.write.regex, t.read.regex) for t in grant.topic] == [
        (level, r"^([01]\.){28}(orders)$", "^$") for level in levels]
    # The routing keys are a pattern, not a finite list of names: the review treats any change of it as widening.
    assert {(t.write.names, t.read.names) for t in grant.topic} == {(None, ())}


def test_the_topic_permission_lets_a_consumer_delay_copies_only_to_its_own_levels_queues():
    """RabbitMQ searches the routing key with the write regex; without the topic permission a consumer could
    route a copy into any queue of the vhost through the delivery exchange."""
    plan = planned(levels_vhost(
        [levels_queue("orders.billing"), levels_queue("orders"), {**levels_queue("orders.shipping"),
                                                                  "retry": {"delays": ["1s"]}}],
        applications=[{"user": "billing-app", "consumes": ["orders.billing", "orders.shipping"]},
                      {"user": "orders-app", "consumes": ["orders"]}]))
    billing, orders = plan.permissions
    assert billing.write.regex == exact_names(["orders.billing.error", "orders.shipping.error", "orders.shipping.retry",
                                         *(f"rabbitmq-retry.delay.{k}" for k in range(17))])
    assert len({t.write for t in billing.topic}) == 1 and len({t.write for t in orders.topic}) == 1
    own, other = billing.topic[0].write, orders.topic[0].write
    for units in (0, 1, 5, 2**17 - 1, 2**28 - 1):
        assert re.search(own.regex, naming.delay_routing_key(units, "orders.billing"))
        assert not re.search(own.regex, naming.delay_routing_key(units, "orders"))  # another app's queue
        assert not re.search(own.regex, naming.delay_routing_key(units, "orders.shipping"))  # a tiers queue
        assert not re.search(own.regex, naming.delay_routing_key(units, "orders.billingX"))
        assert not re.search(own.regex, naming.delay_routing_key(units, "ordersXbilling"))  # `.` is escaped
        assert re.search(other.regex, naming.delay_routing_key(units, "orders"))
        assert not re.search(other.regex, naming.delay_routing_key(units, "orders.billing"))
    for forged in ("0." * 27 + "orders.billing", "0." * 29 + "orders.billing", "0." * 27 + "2.orders.billing",
                   "orders.billing", "#.orders.billing"):
        assert not re.search(own.regex, forged), forged


def test_an_application_that_consumes_no_levels_queue_gets_no_topic_permission_and_operators_only_level_0():
    plan = planned(levels_vhost(applications=[{"user": "publisher", "publishes": ["events"], "consumes": ["audit"]}],
                                operators=[{"user": "ops"}]))
    publisher, operator = plan.permissions
    assert publisher.topic == () and "delay" not in publisher.write.regex
    # Level 0 alone: a redrive with a zero delay, which the delivery exchange routes to exactly its queue.
    assert (operator.configure.regex, operator.write.regex, operator.read.regex) == (
        "^$", r"^(events|rabbitmq\-retry\.delay\.0)$", r"^(orders\.error)$")
    assert operator.topic == ()


# --- contract ------------------------------------------------------------------------------------------------

def default_contract(**vhost: Any) -> dict[str, Any]:
    raw = levels_vhost([{**levels_queue("orders.billing"), "type": "quorum",
                         "retry": {"strategy": "levels", "max_retries": 8}}], **vhost)
    return planned(raw).retryables[0].contract("shop")


def test_the_levels_contract_is_exactly_what_a_consumer_needs():
    assert default_contract() == {
        "strategy": "levels", "vhost": "shop", "queue": "orders.billing", "queue_type": "quorum",
        "delay_exchange": "rabbitmq-retry.delay.16",
        "delay_exchanges": [f"rabbitmq-retry.delay.{k}" for k in range(17)],
        "delay_unit_ms": 1000, "delay_words": 28, "delay_levels": 17, "max_delay_ms": 86_400_000,
        "routing_key_format": "the delay in units, ceil(delay_ms / delay_unit_ms) capped at 2^delay_levels - 1, as "
                              "delay_words binary digits, most significant first, each followed by '.', then the "
                              "queue name",
        "backoff": {"initial_ms": 1000, "multiplier": 2.0, "max_ms": 3_600_000, "jitter": 0.2},
        "max_retries": 8, "delivery_limit": 28, "attempt_header": "retry-count",
        "error_exchange": "orders.billing.error", "error_queue": "orders.billing.error"}


def test_a_classic_levels_contract_has_no_delivery_limit_and_the_client_accepts_both():
    contract = default_contract()
    assert validate(contract) == contract
    assert load_contract({"shop": {"orders.billing": contract}}) == contract
    classic = planned(levels_vhost([{**levels_queue(), "type": "classic"}])).retryables[0].contract("shop")
    assert classic["delivery_limit"] is None and validate(json.loads(json.dumps(classic)))["queue"] == "orders"


@pytest.mark.parametrize("delay_levels", [None, SMALL, {"unit": "250ms", "max_delay": "9h"}])
def test_the_client_and_the_plan_spell_the_same_routing_key_for_every_delay(delay_levels):
    contract = validate(planned(levels_vhost([levels_queue("orders.billing", backoff={"max": "10s"})],
                                             delay_levels)).retryables[0].contract("shop"))
    unit, top = contract["delay_unit_ms"], 2 ** contract["delay_levels"] - 1
    for delay_ms in (0, 1, 249, 250, 251, 999, 1000, 1001, 5000, 15_000, 15_001, 86_400_000, 10**12, 0.5, 1000.5):
        units = min(math.ceil(delay_ms / unit), top)
        assert client_levels.delay_routing_key(contract, delay_ms) == naming.delay_routing_key(
            units, "orders.billing"), delay_ms
    # The design's own example: 5 s in 1 s units.
    if delay_levels is None:
        assert client_levels.delay_routing_key(contract, 5000) == "0." * 25 + "1.0.1.orders.billing"


def test_a_copy_the_client_addresses_lands_in_the_planned_queue_after_at_least_its_delay():
    plan = routed_plan()
    contract = validate(plan.retryables[0].contract("shop"))
    for delay_ms in (0, 1, 999, 1000, 1001, 7_500, 14_999, 15_000, 60_000):
        key = client_levels.delay_routing_key(contract, delay_ms)
        units = int("".join(key.split(".")[:28]), 2)
        start = client_levels.delay_exchange(contract, delay_ms)
        destination, waited, levels = trip(plan, units, contract["queue"], start)
        assert destination == contract["queue"]
        assert waited >= min(delay_ms, 15_000) and waited - delay_ms < 1000  # late by less than a unit, never early
        # The same way as from the top, minus the levels above the highest 1 bit, which only pass a copy down.
        assert (destination, waited, levels) == trip(plan, units, contract["queue"])
        assert start == f"rabbitmq-retry.delay.{max(units.bit_length() - 1, 0)}"


def test_a_contract_without_delay_exchanges_is_followed_through_the_top_level():
    contract = default_contract()
    del contract["delay_exchanges"]
    assert validate(contract) == contract
    assert client_levels.delay_exchange(contract, 1000) == "rabbitmq-retry.delay.16"
    assert client_levels.delay_exchange(default_contract(), 1000) == "rabbitmq-retry.delay.0"
    assert client_levels.delay_exchange(default_contract(), 5000) == "rabbitmq-retry.delay.2"
    assert client_levels.delay_exchange(default_contract(), 10**12) == "rabbitmq-retry.delay.16"  # capped


@pytest.mark.parametrize("exchanges", [["rabbitmq-retry.delay.0"], [f"rabbitmq-retry.delay.{k}" for k in range(1, 18)]])
def test_the_client_refuses_delay_exchanges_that_are_not_one_per_level_up_to_delay_exchange(exchanges):
    with pytest.raises(ContractError, match=r"delay_exchanges: expected one exchange name per level \(17\), level 0 "
                                            r"first, the last being delay_exchange \(rabbitmq-retry\.delay\.16\)"):
        validate({**default_contract(), "delay_exchanges": exchanges})
    with pytest.raises(ContractError, match=r"delay_exchanges: 'rabbitmq-retry.delay.16' is not of type 'array'$"):
        validate({**default_contract(), "delay_exchanges": "rabbitmq-retry.delay.16"})


# --- components under mocks ----------------------------------------------------------------------------------

BINDING = "rabbitmq:index/binding:Binding"
DELAY_LEVELS_TYPE = "rabbitmq-retry:index:DelayLevels"


def test_a_vhost_with_a_levels_queue_registers_one_delay_levels_component_with_the_level_children():
    from components import Vhost
    from components.plan import layout
    from tools.lib.mockrun import record

    raw = levels_vhost(delay_levels=SMALL, applications=[{"user": "app", "consumes": ["orders"]}])
    resources = record(lambda: Vhost("shop", {"vhost": raw, "passwords": {"app": "pw"}}))
    (component,) = [r for r in resources if r.type == DELAY_LEVELS_TYPE]
    assert component.name == "shop-delay-levels"
    children = sorted(r.name for r in resources if r.parent == component.urn)
    assert children == sorted(["shop-delay-levels-deliver", *(f"shop-delay-levels-level-{k}{suffix}" for k in range(4)
                                                               for suffix in ("", "-exchange", "-policy", "-wait",
                                                                              "-pass")),
                               *(f"shop-delay-levels-undeliverable{suffix}" for suffix in ("", "-exchange",
                                                                                          "-binding", "-policy"))])
    assert component.outputs == {"delivery_exchange": "rabbitmq-retry.delay.deliver",
                                 "delay_exchange": "rabbitmq-retry.delay.3",
                                 "queues": [*(f"rabbitmq-retry.delay.{k}" for k in range(4)),
                                            "rabbitmq-retry.delay.undeliverable"],
                                 "undeliverable_queue": "rabbitmq-retry.delay.undeliverable"}
    by_name = {r.name: r for r in resources}
    level_0 = by_name["shop-delay-levels-level-0"].inputs
    assert (level_0["name"], json.loads(level_0["settings"]["argumentsJson"])) == ("rabbitmq-retry.delay.0", {
        "x-dead-letter-exchange": "rabbitmq-retry.delay.deliver", "x-dead-letter-strategy": "at-least-once",
        "x-overflow": "reject-publish", "x-queue-type": "quorum"})
    # Every `0` bit is an exchange-to-exchange binding, every `1` bit a binding to the level's own queue.
    bindings = [r for r in resources if r.type == BINDING and r.parent == component.urn]
    assert {(r.name.rsplit("-", 1)[1], r.inputs["destinationType"]) for r in bindings} == {
        ("pass", "exchange"), ("wait", "queue"), ("binding", "queue")}  # the last: the undeliverable queue's
    assert by_name["shop-delay-levels-level-0-pass"].inputs["destination"] == "rabbitmq-retry.delay.deliver"
    # The level queue waits for its TTL policy: a message that arrived first would never expire.
    assert by_name["shop-delay-levels-level-2-policy"].urn in by_name["shop-delay-levels-level-2"].dependencies
    # The retryable queue's delivery binding is wired to the delivery exchange resource, not to a plain name.
    delivery = by_name["shop-orders-delivery-binding"]
    assert delivery.inputs["source"] == "rabbitmq-retry.delay.deliver"
    assert by_name["shop-delay-levels-deliver"].urn in delivery.dependencies
    # The topic permissions wait for the levels' exchanges (RabbitMQ 4.3 refuses one on a missing exchange).
    topic_grant = by_name["shop-topic-permissions-app"]
    assert all(by_name[f"shop-delay-levels-level-{k}-exchange"].urn in topic_grant.dependencies for k in range(4))
    assert by_name["shop"].outputs["queues"] == ["audit", "orders", "orders.error",
                                                 *(f"rabbitmq-retry.delay.{k}" for k in range(4)),
                                                 "rabbitmq-retry.delay.undeliverable"]
    chains = sorted(("$".join(t.rsplit(":", 1)[-1] for t in r.urn.split("::")[2].split("$")[:-1]),
                     r.urn.split("::")[2].split("$")[-1].rsplit(":", 1)[-1], r.name)
                    for r in resources if r.type != "pulumi:pulumi:Stack")
    assert chains == sorted(layout.logical_names("shop", plan_vhost(load_vhost(raw, "v"))))


def test_a_vhost_without_a_levels_queue_registers_no_delay_levels():
    from components import Vhost
    from tools.lib.mockrun import record

    assert not [r for r in record(lambda: Vhost("shop", {"vhost": vhost_config()})) if r.type == DELAY_LEVELS_TYPE]


def test_a_standalone_delay_levels_and_retryable_queue_wire_together():
    from components import RetryableQueue
    from components.pulumi.delay_levels import DelayLevels as DelayLevelsComponent
    from tools.lib.mockrun import record

    def program() -> None:
        levels = DelayLevelsComponent("levels", {"vhost": "payments", "delay_levels": SMALL})
        RetryableQueue("billing", {"vhost": "payments", "queue": levels_queue("billing"), "delay_levels": levels})

    resources = record(program)
    by_name = {r.name: r for r in resources}
    assert sorted(r.name for r in resources if r.custom and r.parent == by_name["billing"].urn
                  and r.type != "pulumi:index:Stash") == [
        "billing-delivery-binding", "billing-error", "billing-error-binding", "billing-error-exchange",
        "billing-error-policy", "billing-input", "billing-policy"]
    delivery = by_name["billing-delivery-binding"]
    assert by_name["levels-deliver"].urn in delivery.dependencies
    assert delivery.inputs["routingKey"] == "*." * 28 + "billing"
    assert by_name["billing"].outputs["contract"]["delay_exchange"] == by_name["levels"].outputs["delay_exchange"] \
        == "rabbitmq-retry.delay.3"
    assert by_name["billing"].outputs.get("retry_exchange") is None and by_name["billing"].outputs["wait_queues"] == []


def test_a_standalone_levels_queue_cannot_disagree_with_its_levels():
    """The queue takes the DelayLevels component itself, not a second description of its levels: its contract
    names only levels the component declares. (Given `{unit 10s, max 1d}` beside levels of `{unit 1s, max 1h}`,
    it once named `rabbitmq-retry.delay.13`, which did not exist: every retry unroutable.)"""
    from components import RetryableQueue
    from components.pulumi.delay_levels import DelayLevels as DelayLevelsComponent
    from tools.lib.mockrun import record

    def program() -> None:
        levels = DelayLevelsComponent("levels", {"vhost": "payments",
                                                 "delay_levels": {"unit": "1s", "max_delay": "1h"}})
        RetryableQueue("refunds", {"vhost": "payments", "delay_levels": levels,
                                   "queue": levels_queue("refunds", backoff={"max": "5m"})})

    by_name = {r.name: r for r in record(program)}
    contract = by_name["refunds"].outputs["contract"]
    declared = {r.inputs["name"] for r in by_name.values() if r.type == "rabbitmq:index/exchange:Exchange"}
    assert set(contract["delay_exchanges"]) <= declared and contract["delay_exchange"] in declared
    assert (contract["delay_unit_ms"], contract["delay_levels"], contract["max_delay_ms"]) == (1000, 12, 3_600_000)
    assert contract["delay_exchange"] == by_name["levels"].outputs["delay_exchange"] == "rabbitmq-retry.delay.11"


def test_a_standalone_levels_queue_needs_the_delay_levels_component_and_no_second_description_of_them():
    from components import RetryableQueue

    queue = levels_queue("billing")
    with pytest.raises(ConfigError) as error:
        RetryableQueue("billing", {"vhost": "payments", "queue": queue})
    assert error.value.problems == [("RetryableQueue(billing).delay_levels", "missing; retry.strategy levels retries "
                                     "through the vhost's delay levels: pass its DelayLevels component")]
    with pytest.raises(ConfigError) as error:
        RetryableQueue("billing", {"vhost": "payments", "queue": queue,
                                   "delay_levels": {"unit": "10s", "max_delay": "1d"}})
    assert error.value.problems == [("RetryableQueue(billing).delay_levels",
                                     "expected the DelayLevels component of the queue's vhost, got dict")]


def test_the_delay_levels_of_a_tiers_queue_another_vhost_or_too_short_a_backoff_are_refused():
    from components import RetryableQueue
    from components.pulumi.delay_levels import DelayLevels as DelayLevelsComponent
    from tools.lib.mockrun import record

    def refused(args: dict[str, Any]) -> list[tuple[str, str]]:
        def program() -> None:
            levels = DelayLevelsComponent("levels", {"vhost": "v", "delay_levels": SMALL})
            RetryableQueue("billing", {"vhost": "v", **args, "delay_levels": levels})

        with pytest.raises(ConfigError) as error:
            record(program)
        return error.value.problems

    assert refused({"queue": {"name": "billing", "retry": {"delays": ["1s"]}}}) == [(
        "RetryableQueue(billing).delay_levels", "the queue's retry.strategy is tiers, which has no delay levels; "
        "remove delay_levels")]
    assert refused({"vhost": "w", "queue": levels_queue("billing")}) == [(
        "RetryableQueue(billing).delay_levels", 'the DelayLevels component is in vhost "v", not "w"; pass the one '
        'of vhost "w"')]
    too_long = ("1m is longer than RetryableQueue(billing).delay_levels.max_delay (15s), the longest delay "
                "the levels hold; lower max or raise max_delay")
    assert refused({"queue": levels_queue("billing", backoff={"max": "1m"})}) == [
        ("RetryableQueue(billing).queue.retry.backoff.max", too_long)]
    parsed = load_queue(levels_queue("billing", backoff={"max": "1m"}), "q")
    assert refused({"queue": parsed}) == [("RetryableQueue(billing).queue.retry.backoff.max", too_long)]
    other_levels = plan_vhost(load_vhost(levels_vhost([levels_queue("billing")], {"unit": "1s", "max_delay": "1h"}),
                                         "v")).retryables[0]
    assert refused({"plan": other_levels}) == [(
        "RetryableQueue(billing).delay_levels", "not the levels the plan was made with; pass the DelayLevels "
        "component of the plan's vhost")]
    with pytest.raises(ConfigError) as error:
        DelayLevelsComponent("levels", {"vhost": "v", "delay_levels": {"unit": "1m", "max_delay": "1s"}})
    assert error.value.problems == [("DelayLevels(levels).delay_levels.max_delay", "'1s' is shorter than unit '1m'")]


def test_an_imported_level_is_adopted_by_the_resource_the_delay_levels_component_registers():
    """`vhosts[].import` entries reach the levels' resources as they reach a retryable queue's."""
    from components import Vhost
    from tools.lib.mockrun import record

    raw = levels_vhost(delay_levels=SMALL, existing=True, name="shop")
    raw["import"] = ["queue rabbitmq-retry.delay.0@shop", "exchange rabbitmq-retry.delay.deliver@shop",
                     "policy rabbitmq-retry.delay.0@shop", "binding shop/rabbitmq-retry.delay.1/rabbitmq-retry.delay.0/"
                     "exchange/" + "*." * 26 + "0.%23"]
    plan = planned(raw)
    assert plan.delay_levels is not None and plan.delay_levels.queues[0].import_id == "rabbitmq-retry.delay.0@shop"
    resources = record(lambda: Vhost("shop", {"vhost": raw}))
    adopted = {r.name: r.import_id for r in resources if r.import_id}
    assert adopted == {"shop-delay-levels-level-0": "rabbitmq-retry.delay.0@shop",
                       "shop-delay-levels-deliver": "rabbitmq-retry.delay.deliver@shop",
                       "shop-delay-levels-level-0-policy": "rabbitmq-retry.delay.0@shop",
                       "shop-delay-levels-level-1-pass": raw["import"][3].split(" ", 1)[1]}


def test_protect_reaches_every_level_queue_and_nothing_else_of_the_levels():
    from components import Vhost
    from tools.lib.mockrun import record

    resources = record(lambda: Vhost("shop", {"vhost": levels_vhost(delay_levels=SMALL), "protect_queues": True}))
    levels = [r for r in resources if "$rabbitmq-retry:index:DelayLevels$" in r.urn]
    assert sorted(r.name for r in levels if r.protect) == [*(f"shop-delay-levels-level-{k}" for k in range(4)),
                                                           "shop-delay-levels-undeliverable"]
    assert all(r.type == "rabbitmq:index/queue:Queue" for r in levels if r.protect)
    assert not any(r.retain_on_delete for r in levels)
