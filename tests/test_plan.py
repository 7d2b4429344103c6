"""The topology plan: wiring in arguments, tunables in exactly-anchored policies."""

from __future__ import annotations

import re

from components.config.load import load_queue, load_vhost
from components.plan.layout import logical_names
from components.plan.planner import plan_retryable, plan_vhost
from tests.conftest import RETRYABLE, vhost_config


def plan(**overrides):
    return plan_retryable(load_queue({**RETRYABLE, **overrides}, "q"))


def by_name(items):
    return {item.name: item for item in items}


def test_classic_retryable_queue_topology():
    p = plan(type="classic")
    queues = by_name(p.queues)
    assert list(queues) == ["orders", "orders.wait.1", "orders.wait.2", "orders.wait.3", "orders.error"]
    assert queues["orders"].arguments == {"x-queue-type": "classic", "x-dead-letter-exchange": "orders.retry",
                                          "x-dead-letter-routing-key": "wait.1"}
    assert queues["orders.wait.2"].arguments == {"x-queue-type": "classic", "x-dead-letter-exchange": "orders.requeue"}
    assert queues["orders.error"].arguments == {"x-queue-type": "classic"}
    assert {(e.name, e.type) for e in p.exchanges} == {
        ("orders.retry", "direct"), ("orders.requeue", "fanout"), ("orders.error", "fanout")}
    assert {(b.source, b.destination, b.routing_key) for b in p.bindings} == {
        ("orders.retry", "orders.wait.1", "wait.1"), ("orders.retry", "orders.wait.2", "wait.2"),
        ("orders.retry", "orders.wait.3", "wait.3"), ("orders.requeue", "orders", ""),
        ("orders.error", "orders.error", "")}


def test_the_requeue_exchange_returns_only_to_its_own_queue():
    p = plan()
    assert [b.destination for b in p.bindings if b.source == "orders.requeue"] == ["orders"]


def test_quorum_queues_dead_letter_at_least_once():
    queues = by_name(plan(type="quorum").queues)
    for name in ("orders", "orders.wait.1", "orders.wait.3"):
        assert queues[name].arguments["x-dead-letter-strategy"] == "at-least-once"
        assert queues[name].arguments["x-overflow"] == "reject-publish"
    assert queues["orders.error"].arguments == {"x-queue-type": "quorum"}


def test_delays_live_in_policies_so_editing_one_replaces_no_queue():
    before, after = plan(), plan(retry={"delays": ["2s", "20s", "2m"], "max_retries": 5})
    assert before.queues == after.queues and before.exchanges == after.exchanges and before.bindings == after.bindings
    ttl = {p.name: p.definition["message-ttl"] for p in after.policies if "message-ttl" in p.definition}
    assert ttl == {"orders.wait.1": "2000", "orders.wait.2": "20000", "orders.wait.3": "120000"}


def test_policies_are_anchored_one_per_queue_and_never_overlap():
    p = plan(type="quorum", max_length=100, retry={"delays": ["1s", "2s"], "error_retention": "1h",
                                                    "error_max_length": 10})
    names = [q.name for q in p.queues]
    for policy in p.policies:
        matching = [name for name in names if re.search(policy.pattern, name)]
        assert matching == [policy.name]
        # Strings the provider converts: digits become JSON integers, words stay strings.
        assert all(isinstance(v, str) and (v.isdigit() or k == "overflow") for k, v in policy.definition.items())
        assert policy.apply_to == "queues" and policy.priority == 10
    assert by_name(p.policies)["orders"].definition == {"max-length": "100", "overflow": "reject-publish",
                                                         "delivery-limit": "22"}
    # A full error queue refuses new parked messages instead of dropping the oldest; a quorum one never
    # reaches a delivery limit (RabbitMQ 4's default, 20, would drop a parked message returned that often).
    assert by_name(p.policies)["orders.error"].definition == {"message-ttl": "3600000", "max-length": "10",
                                                               "overflow": "reject-publish",
                                                               "delivery-limit": "1000000"}


def test_no_policy_when_there_is_nothing_to_tune():
    p = plan(type="classic")
    assert {pol.name for pol in p.policies} == {"orders.wait.1", "orders.wait.2", "orders.wait.3"}


def test_arguments_json_is_sorted_and_typed():
    queue = by_name(plan().queues)["orders"]
    assert queue.arguments_json.index("x-dead-letter-exchange") < queue.arguments_json.index("x-queue-type")


def test_contract_tells_a_consumer_how_to_retry_and_park():
    contract = plan().contract("shop")
    assert contract == {
        "vhost": "shop", "queue": "orders", "queue_type": "quorum", "retry_exchange": "orders.retry",
        "reject_routes_to": "wait.1",
        "tiers": [{"routing_key": "wait.1", "queue": "orders.wait.1", "delay_ms": 1000},
                  {"routing_key": "wait.2", "queue": "orders.wait.2", "delay_ms": 10000},
                  {"routing_key": "wait.3", "queue": "orders.wait.3", "delay_ms": 60000}],
        "max_retries": 5, "delivery_limit": 25, "attempt_header": "retry-count",
        "error_exchange": "orders.error", "error_queue": "orders.error",
    }


def test_vhost_plan_separates_plain_and_retryable_queues():
    raw = vhost_config()
    raw["exchanges"].append({"name": "by-header", "type": "headers"})
    raw["queues"][1]["bindings"].append({"exchange": "by-header", "arguments": {"x-match": "all", "n": 3}})
    vhost = plan_vhost(load_vhost(raw, "v"))
    assert [q.name for q in vhost.queues] == ["audit"]
    assert [r.config.name for r in vhost.retryables] == ["orders"]
    bindings = {(b.source, b.destination): b for b in vhost.bindings}
    assert bindings[("events", "orders")].routing_key == "order.created"
    assert bindings[("by-header", "audit")].arguments_json == '{"n": 3, "x-match": "all"}'
    assert bindings[("events", "audit")].arguments_json is None


def test_logical_names_walk_each_component_and_its_nested_components():
    plan = plan_vhost(load_vhost({"name": "/", "queues": [{"name": "q", "retry": {"delays": ["1s"]}}]}, "v"))
    names = logical_names("%2F", plan)
    assert names[0] == ("", "Vhost", "%2F")
    assert ("Vhost", "RetryableQueue", "%2F-q") in names
    assert ("Vhost$RetryableQueue", "Queue", "%2F-q-wait-1") in names
    assert not [name for name in names if name[1] == "VHost"]  # "/" always exists: never created
    created = logical_names("shop", plan_vhost(load_vhost({"name": "shop"}, "v")))
    assert created == [("", "Vhost", "shop"), ("Vhost", "Stash", "shop-path-guard"), ("Vhost", "VHost", "shop-vhost"),
                       ("Vhost", "Stash", "shop-removal-guard")]


def test_a_plain_queue_s_ttl_and_byte_limit_are_in_its_policy_and_single_active_consumer_is_an_argument():
    """Tunables in our policy (a change updates it in place and leaves no room for a user policy to clash);
    single_active_consumer is wiring, a queue argument. A TTL next to max_length needs no policy of its own."""
    from components.plan.checks import check_vhost

    raw = vhost_config(queues=[{"name": "audit", "type": "classic", "max_length": 1000, "message_ttl": "1m30s",
                                "max_length_bytes": 10_000_000, "single_active_consumer": True}])
    vhost_plan = plan_vhost(load_vhost(raw, "vhosts[0]"), "vhosts[0]")
    (queue,) = vhost_plan.queues
    assert queue.arguments == {"x-queue-type": "classic", "x-single-active-consumer": True}
    (policy,) = [p for p in vhost_plan.policies if p.name == "audit"]
    assert dict(policy.definition) == {"max-length": "1000", "overflow": "reject-publish",
                                       "max-length-bytes": "10000000", "message-ttl": "90000"}
    assert policy.sources["message-ttl"] == "vhosts[0].queues[audit].message_ttl"
    assert check_vhost(vhost_plan) == []
    bytes_only = plan_vhost(load_vhost(vhost_config(queues=[{"name": "audit", "type": "classic",
                                                             "max_length_bytes": 5}]), "vhosts[0]"), "vhosts[0]")
    (policy,) = bytes_only.policies
    assert policy.sources == {"overflow": "vhosts[0].queues[audit].max_length_bytes",
                              "max-length-bytes": "vhosts[0].queues[audit].max_length_bytes"}


def test_a_retryable_queue_refuses_the_plain_queue_keys():
    import pytest

    from components.config.load import load_stack_config
    from components.model.problems import ConfigError

    raw = vhost_config(queues=[{**RETRYABLE, "message_ttl": "1m", "single_active_consumer": True}])
    with pytest.raises(ConfigError) as error:
        load_stack_config({"vhosts": [raw]})
    assert [path for path, _ in error.value.problems] == ["vhosts[shop].queues[orders].message_ttl",
                                                          "vhosts[shop].queues[orders].single_active_consumer"]


def test_quorum_group_size_is_an_argument_of_every_queue_a_config_queue_plans_and_absent_without_it():
    """Wiring, like the queue type: the input, wait and error queues of every strategy and a plain queue carry
    `x-quorum-initial-group-size`; the vhost's shared delay levels do not (no queue of the config owns them).
    Without the key no queue has the argument (what was registered before stays byte-identical)."""
    group = "x-quorum-initial-group-size"
    retries = {"tiers": RETRYABLE["retry"],
               "native": {"strategy": "native", "min_delay": "1s", "max_delay": "30s", "max_retries": 5},
               "levels": {"strategy": "levels", "max_retries": 3}}
    for strategy, retry in retries.items():
        raw = vhost_config(queues=[{**RETRYABLE, "retry": retry, "type": "quorum", "quorum_group_size": 2},
                                   {"name": "audit", "type": "quorum", "quorum_group_size": 3}])
        vhost_plan = plan_vhost(load_vhost(raw, "vhosts[0]"), "vhosts[0]")
        (retryable,) = vhost_plan.retryables
        owned = {q.name: q.arguments.get(group) for q in retryable.queues}
        assert set(owned.values()) == {2} and {"orders", "orders.error"} <= set(owned), strategy
        assert [q.arguments[group] for q in vhost_plan.queues] == [3]
        levels = vhost_plan.delay_levels.queues if vhost_plan.delay_levels is not None else ()
        assert all(group not in q.arguments for q in levels)
        assert (strategy == "levels") == bool(levels)
    assert {q.arguments[group] for q in plan(type="quorum", quorum_group_size=1).queues} == {1}
    assert all(group not in q.arguments for q in plan(type="quorum").queues)


def test_quorum_group_size_defaults_to_the_stack_default_on_quorum_queues_only_and_a_classic_queue_refuses_it():
    import pytest

    from components.config.load import load_stack_config
    from components.model.problems import ConfigError

    config = load_stack_config({"defaults": {"quorum_group_size": 3}, "vhosts": [vhost_config(
        queues=[{**RETRYABLE, "type": "quorum"}, {"name": "audit", "type": "classic"},
                {"name": "pinned", "type": "quorum", "quorum_group_size": 1}])]})
    assert [q.quorum_group_size for q in config.vhosts[0].queues] == [3, None, 1]
    with pytest.raises(ConfigError) as error:
        load_stack_config({"defaults": {"quorum_group_size": 0}, "vhosts": [vhost_config(
            queues=[{"name": "audit", "type": "classic", "quorum_group_size": 2},
                    {"name": "zero", "quorum_group_size": 0}])]})
    assert [path for path, _ in error.value.problems] == ["defaults.quorum_group_size",
                                                          "vhosts[shop].queues[audit].quorum_group_size",
                                                          "vhosts[shop].queues[zero].quorum_group_size"]
    assert "quorum-only" in error.value.problems[1][1] and "set type: quorum" in error.value.problems[1][1]
    assert "out of range (use >= 1)" in error.value.problems[2][1]
