"""Preview-time checks: configs that would lose or misroute messages fail before anything is registered."""

from __future__ import annotations

import dataclasses
import json
import re

import pulumi
import pytest

from components import Vhost
from components.config.load import load_vhost
from components.model.plan_types import PolicyPlan
from components.model.problems import TopologyError
from components.plan.checks import check_logical_names, check_vhost, stale_policies
from components.plan.layout import logical_names
from components.plan.planner import plan_vhost
from tests.conftest import vhost_config
from tests.support.problems import messages
from tools.lib.mockrun import mocked_runtime


def plan(raw):
    return plan_vhost(load_vhost(raw, "vhosts[0]"), "vhosts[0]")


def problems(raw) -> list[str]:
    return messages(check_vhost(plan(raw)))


def test_the_shipped_topologies_pass():
    assert problems(vhost_config()) == []
    assert problems(vhost_config(queues=[{"name": "q", "type": "classic", "max_length": 10,
                                          "retry": {"delays": ["1s"], "error_retention": "1h"}}])) == []


def test_a_declared_policy_that_also_matches_one_of_our_queues_is_refused():
    raw = vhost_config(policies=[{"name": "team-limits", "pattern": "^orders", "definition": {"max-length": 5}}])
    # One problem, with the policy's key path, however many of the queue's own queues it hits.
    assert problems(raw) == [
        "vhosts[0].policies[team-limits] (policy 'team-limits') matches 5 queues that have a policy of this stack "
        "(`orders`, `orders.error`, `orders.wait.1` and 2 more): RabbitMQ applies only one policy per queue; narrow "
        "the pattern to leave them out, and set what it sets through the queue's own keys (max_length, delivery_limit; "
        "message_ttl, max_length_bytes on a plain queue)"]


def test_two_config_policies_on_one_queue_name_both_key_paths():
    raw = vhost_config(queues=[{"name": "audit", "type": "classic"}], policies=[
        {"name": "a", "pattern": "^audit$", "definition": {"max-length": 5}},
        {"name": "b", "pattern": "^aud", "definition": {"max-length": 6}}])
    assert problems(raw) == ["vhosts[0].policies[a] (policy 'a') and vhosts[0].policies[b] (policy 'b') both match "
                             "`audit`: RabbitMQ applies only one policy per queue; narrow the patterns so that each "
                             "queue has one policy"]


def test_a_policy_that_matches_no_queue_of_ours_is_fine():
    raw = vhost_config(policies=[{"name": "other-team", "pattern": "^payments\\.", "definition": {"max-length": 5}}])
    assert problems(raw) == []


def test_a_retry_path_that_reaches_another_queue_is_refused():
    raw = vhost_config()
    raw["queues"][1]["bindings"].append({"exchange": "orders.requeue", "external": True})
    assert problems(raw) == ['retry path of "orders" returns to [\'audit\', \'orders\'] instead of exactly '
                             '"orders"; remove other bindings from "orders.requeue"']


def test_a_dead_letter_cycle_without_rejection_is_refused():
    # A TTL on the input queue expires messages into the retry loop, and back, with nobody rejecting.
    raw = vhost_config(queues=[{"name": "orders", "type": "classic", "retry": {"delays": ["1s"]}}],
                       policies=[{"name": "expire-orders", "pattern": "^orders$",
                                  "definition": {"message-ttl": 60000}}])
    assert problems(raw) == [
        'vhosts[0].policies[expire-orders].definition.message-ttl: message-ttl 60000 reaches input queue "orders": '
        'waiting '
        "messages expire into the retry loop and RabbitMQ drops them when they come round (nothing rejected them); "
        'narrow its pattern so that it does not match "orders"',
        "dead-letter cycle with no rejection in it: orders → orders.wait.1 → orders; RabbitMQ drops such messages "
        "(remove the TTL or length limit that moves them)"]


def test_a_dead_letter_exchange_that_routes_nowhere_is_refused():
    plan = plan_vhost(load_vhost(vhost_config(), "v"))
    (orders,) = plan.retryables
    broken = dataclasses.replace(orders, bindings=tuple(b for b in orders.bindings if b.routing_key != "wait.1"))
    found = messages(check_vhost(dataclasses.replace(plan, retryables=(broken,))))
    assert '"orders.retry" routes wait.1 to [] instead of exactly "orders.wait.1"' in found
    assert ('queue "orders" dead-letters to "orders.retry" with key wait.1, which routes to no queue: '
            "RabbitMQ would drop those messages") in found


def test_the_component_fails_before_registering_anything():
    raw = vhost_config()
    raw["queues"][1]["bindings"].append({"exchange": "orders.requeue", "external": True})
    with mocked_runtime() as monitor, pytest.raises(TopologyError) as error:
        pulumi.runtime.test(lambda: Vhost("shop", {"vhost": raw}))()
    # The mocks may register the stack itself; the component must register nothing, not even itself.
    assert [r.type for r in monitor.registered if r.type != "pulumi:pulumi:Stack"] == []
    assert str(error.value).startswith('vhost "shop": the planned topology would lose or misroute messages:\n  ')


@pytest.mark.parametrize(("pattern", "key", "expected"), [
    ("order.*", "order.created", True), ("order.*", "order.created.eu", False), ("#", "anything.at.all", True),
    ("order.#", "order", True), ("*.created", "order.created", True), ("a.#.z", "a.b.c.z", True),
])
def test_topic_routing_is_simulated_like_rabbitmq(pattern, key, expected):
    from components.plan.checks import _topic_matches

    assert _topic_matches(pattern, key) is expected


def test_logical_names_joined_with_dashes_that_meet_are_refused():
    plans = [(v, plan_vhost(load_vhost({"name": v, "queues": [{"name": q}]}, "v")))
             for v, q in (("a", "x-queue-y"), ("a-queue-x", "y"))]
    advice = 'rename a queue, exchange or vhost so that names joined with "-" stay distinct'
    # Quorum by default: each plain queue has a delivery-limit policy too.
    assert messages(check_logical_names(plans)) == [
        f'vhost "a" and vhost "a-queue-x" would both register a {kind} named "{name}"; {advice}'
        for kind, name in (("Queue", "a-queue-x-queue-y"), ("Policy", "a-queue-x-queue-y-policy"))]


def test_the_program_refuses_clashing_logical_names_before_registering(program_copy):
    from tools.lib.mockrun import record_program

    tmp_path = program_copy
    (tmp_path / "Pulumi.clash.yaml").write_text(
        "config:\n  rabbitmq-retry:vhosts:\n"
        "    - {name: v, queues: [{name: orders, retry: {delays: [1s]}},\n"
        "                         {name: orders-wait-1, retry: {delays: [1s]}}]}\n")
    with pytest.raises(pulumi.RunError, match='would both register a Policy named "v-orders-wait-1-policy"'):
        record_program("clash", tmp_path)


def test_the_program_checks_every_vhost_before_registering_and_names_stack_file_paths(program_copy):
    from tools.lib.mockrun import record_program

    (program_copy / "Pulumi.ops.yaml").write_text(
        "config:\n  rabbitmq-retry:vhosts:\n"
        "    - {name: a, queues: [{name: fine, retry: {delays: [1s]}}]}\n"
        "    - name: b\n"
        "      queues: [{name: orders, type: classic, retry: {delays: [1s]}}]\n"
        "      operator_policies: [{name: ops, pattern: '^orders$', definition: {message-ttl: 60000}}]\n")
    with pytest.raises(pulumi.RunError) as refused:
        record_program("ops", program_copy)
    assert ('vhosts[b].operator_policies[ops].definition.message-ttl: message-ttl 60000 reaches input queue '
            '"orders"') in str(refused.value)
    assert "Vhost(" not in str(refused.value)


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_logical_names_predict_exactly_what_the_components_register(stack):
    from components.model.naming import vhost_key
    from components.model.stack_config import Defaults
    from tools.lib.mockrun import record_program, stack_config

    registered = sorted((r.type.rsplit(":", 1)[-1], r.name) for r in record_program(stack)
                        if r.type != "pulumi:pulumi:Stack")
    config, _ = stack_config(stack)
    vhosts = json.loads(config["rabbitmq-retry:vhosts"])
    defaults = Defaults(**json.loads(config["rabbitmq-retry:defaults"]))
    predicted = sorted((kind, name) for raw in vhosts
                       for _, kind, name in logical_names(vhost_key(raw["name"]), plan_vhost(load_vhost(raw, "v",
                                                                                                       defaults))))
    assert registered == predicted


# Effective policies: user policy, operator policy and queue arguments merged as RabbitMQ merges them.

def operator(definition, pattern=".*", **extra):
    return {"operator_policies": [{"name": "ops", "pattern": pattern, "definition": definition, **extra}]}


OPS = "vhosts[0].operator_policies[ops]"


def narrow(queue: str) -> str:
    return f"narrow the operator policy's pattern so that it does not match \"{queue}\""


def test_an_operator_message_ttl_on_every_queue_is_refused_for_the_input_and_the_error_queue():
    # The wait tiers keep their delays (1 min is not above the operator's 60 s), the plain queue is the user's.
    assert problems(vhost_config(**operator({"message-ttl": 60000}))) == [
        f'{OPS}.definition.message-ttl: message-ttl 60000 reaches input queue "orders": waiting messages expire '
        "into the retry loop and RabbitMQ drops them when they come round (nothing rejected them); "
        + narrow("orders"),
        f'{OPS}.definition.message-ttl: message-ttl 60000 reaches error queue "orders.error": RabbitMQ deletes '
        "parked messages after 1m; set retry.error_retention instead, or " + narrow("orders.error"),
        "dead-letter cycle with no rejection in it: orders → orders.wait.1 → orders; RabbitMQ drops such messages "
        "(remove the TTL or length limit that moves them)"]


def test_our_own_error_retention_is_the_one_ttl_an_error_queue_may_have():
    raw = vhost_config()
    raw["queues"][0]["retry"]["error_retention"] = "1h"
    assert problems(raw) == []
    # A longer operator TTL changes nothing (the lower value wins); a shorter one takes over.
    assert problems({**raw, **operator({"message-ttl": 7200000}, "error$")}) == []
    assert problems({**raw, **operator({"message-ttl": 60000}, "error$")}) == [
        f'{OPS}.definition.message-ttl: message-ttl 60000 reaches error queue "orders.error": RabbitMQ deletes '
        "parked messages after 1m; set retry.error_retention instead, or " + narrow("orders.error")]


def test_expires_is_refused_on_every_queue_of_the_retry_topology():
    found = problems(vhost_config(**operator({"expires": 3600000}, "^orders")))
    assert found == [
        f'{OPS}.definition.expires: expires 3600000 reaches {role} queue "{queue}": RabbitMQ deletes the queue with '
        f"its messages once it has had no consumer for 1h; " + narrow(queue)
        for role, queue in (("input", "orders"), ("wait", "orders.wait.1"), ("wait", "orders.wait.2"),
                            ("wait", "orders.wait.3"), ("error", "orders.error"))]


def test_a_lower_operator_ttl_on_a_wait_tier_is_refused():
    assert problems(vhost_config(**operator({"message-ttl": 30000}, r"\.wait\."))) == [
        f'{OPS}.definition.message-ttl: message-ttl 30000 on wait queue "orders.wait.3" is not the tier\'s delay '
        '(1m): RabbitMQ retries after 30s instead; ' + narrow("orders.wait.3")]


def test_a_delivery_limit_at_or_below_max_retries_plus_one_is_refused():
    # orders: quorum, max_retries 5, own delivery-limit 25 (default 20 + 5).
    assert problems(vhost_config(**operator({"delivery-limit": 7}, "^orders$"))) == []
    assert problems(vhost_config(**operator({"delivery-limit": 6}, "^orders$"))) == [
        f'{OPS}.definition.delivery-limit: delivery-limit 6 on quorum queue "orders" is not above max_retries + 1 '
        "(6): on RabbitMQ 4 each retry counts toward it, and a message over it jams in a dead-letter cycle; raise "
        "it above 6, or " + narrow("orders")]
    # The config refuses delivery_limit = max_retries + 1 itself (tests/test_config.py).


def test_an_unlimited_operator_delivery_limit_does_not_lift_ours():
    # A negative (unlimited) value loses to a finite one, in either policy.
    assert problems(vhost_config(**operator({"delivery-limit": -1}, "^orders$"))) == []


OPERATOR_OVERFLOW = (", or add overflow: reject-publish to the operator policy (RabbitMQ 4.3.6 takes it there, "
                     "3.10.8 refuses it)")
"""Every fix offered must be one the broker takes: an operator policy takes overflow on 4.3.6 only."""


def test_a_length_limit_that_dead_letters_instead_of_refusing_publishes_is_refused():
    # The first fix offered works on every broker: the queue's own max_length policy carries overflow.
    raw = vhost_config(queues=[{"name": "q", "type": "classic", "retry": {"delays": ["1s"]}}],
                       **operator({"max-length": 100}, "^q"))
    assert problems(raw) == [
        f'{OPS}.definition.max-length: max-length 100 on input queue "q", which dead-letters, without overflow '
        "reject-publish (effective: drop-head): when full, RabbitMQ dead-letters the oldest message into the retry "
        "loop before any consumer saw it, and drops it when it comes round; set max_length on queue \"q\" (its "
        "policy then carries overflow: reject-publish, which RabbitMQ applies with the operator's lower limit), "
        + narrow("q") + OPERATOR_OVERFLOW,
        f'{OPS}.definition.max-length: max-length 100 on wait queue "q.wait.1", which dead-letters, without '
        'overflow reject-publish (effective: drop-head): when full, RabbitMQ sends the oldest message back to "q" '
        "before its delay is over; " + narrow("q.wait.1") + OPERATOR_OVERFLOW,
        "dead-letter cycle with no rejection in it: q → q.wait.1 → q; RabbitMQ drops such messages (remove the TTL "
        "or length limit that moves them)"]


def test_a_length_limit_that_refuses_publishes_is_accepted():
    # Quorum queues carry x-overflow reject-publish as an argument; the classic queue's own max_length
    # policy carries it, and the operator's lower max-length merges with it.
    assert problems(vhost_config(**operator({"max-length": 100}))) == []
    classic = vhost_config(queues=[{"name": "q", "type": "classic", "max_length": 1000, "retry": {"delays": ["1s"]}}],
                           **operator({"max-length": 100}, "^q$"))
    assert problems(classic) == []
    assert problems({**classic, **operator({"max-length-bytes": 100, "overflow": "reject-publish"}, "^q")}) == []


def test_an_operator_overflow_other_than_reject_publish_wins_on_a_quorum_queue():
    # On quorum queues a policy's overflow beats the x-overflow argument; on 4.x an operator's beats ours.
    assert problems(vhost_config(**operator({"max-length": 100, "overflow": "drop-head"}, "^orders$")))[0] == (
        f'{OPS}.definition.max-length: max-length 100 on input queue "orders", which dead-letters, without '
        "overflow reject-publish (effective: drop-head): when full, RabbitMQ dead-letters the oldest message into "
        "the retry loop before any consumer saw it, and drops it when it comes round; set the operator policy's "
        "overflow to reject-publish, or " + narrow("orders"))


@pytest.mark.parametrize(("apply_to", "matched"), [
    ("queues", True), ("all", True), ("quorum_queues", True), ("classic_queues", False), ("streams", False),
    ("exchanges", False)])
def test_apply_to_decides_which_queues_a_policy_reaches(apply_to, matched):
    raw = vhost_config(policies=[{"name": "team", "pattern": "^orders$", "apply_to": apply_to,
                                  "definition": {"max-length": 5}}])
    overlap = ("vhosts[0].policies[team] (policy 'team') matches 1 queue that has a policy of this stack (`orders`): "
               "RabbitMQ applies only one policy per queue")
    assert any(p.startswith(overlap) for p in problems(raw)) is matched
    ttl = problems(vhost_config(**operator({"message-ttl": 1000}, "^orders$", apply_to=apply_to)))
    assert bool(ttl) is matched


def test_apply_to_is_the_same_for_overlaps_and_for_the_effective_policy():
    from components.plan.checks import _graph, _overlaps
    from components.plan.effective import winners

    raw = vhost_config(policies=[{"name": "classic-only", "pattern": "^orders$", "apply_to": "classic_queues",
                                  "priority": 99, "definition": {"message-ttl": 5}}])
    graph = _graph(plan(raw), ())
    # quorum: the classic-only policy never applies
    assert winners(graph.policies.matching_queue(graph.queues["orders"]))[0].name == "orders"
    assert _overlaps(graph) == []


def test_a_policy_with_a_key_the_queue_type_refuses_does_not_apply_at_all():
    # RabbitMQ skips the whole policy: delivery-limit makes it inapplicable to classic queues, TTL included.
    raw = vhost_config(queues=[{"name": "q", "type": "classic", "retry": {"delays": ["1s"]}}],
                       **operator({"message-ttl": 1000, "delivery-limit": 5}))
    assert problems(raw) == []
    assert messages(stale_policies(plan(raw))) == [
        f"{OPS}: operator policy \"ops\" (pattern '.*', apply-to queues) matches no queue or exchange this stack "
        'plans in vhost "shop"; if a queue was renamed, update the pattern, otherwise ignore this']


def test_policies_that_match_nothing_planned_are_warnings_not_errors():
    raw = vhost_config(policies=[{"name": "old-orders", "pattern": "^order$", "definition": {"max-length": 5}},
                                 {"name": "alternate", "pattern": "^events$", "apply_to": "exchanges",
                                  "definition": {"alternate-exchange": "unrouted"}}],
                       **operator({"max-length": 5}, "^payments\\."))
    assert problems(raw) == []
    assert messages(stale_policies(plan(raw))) == [
        "vhosts[0].policies[old-orders]: policy \"old-orders\" (pattern '^order$', apply-to queues) matches no queue "
        "or "
        'exchange this stack plans in vhost "shop"; if a queue was renamed, update the pattern, otherwise ignore '
        "this",
        f"{OPS}: operator policy \"ops\" (pattern '^payments\\\\.', apply-to queues) matches no queue or exchange "
        'this stack plans in vhost "shop"; if a queue was renamed, update the pattern, otherwise ignore this']


def test_exact_name_patterns_are_indexed_without_changing_what_matches():
    from components.plan.effective import PolicyIndex

    policies = [PolicyPlan(str(i), str(i), pattern, 0, {}) for i, pattern in enumerate(
        (r"^orders\.wait\.1$", r"^orders$", r"^orders\$$", "orders", r"^a\\$", "^b$"))]
    index = PolicyIndex(policies)
    for name in ("orders", "orders.wait.1", "ordersXwait.1", "orders$", "a\\", "b", "b\n", "orders\n"):
        expected = sorted(p.key for p in policies if re.search(p.pattern, name))
        assert sorted(p.key for p in index.matching_name(name)) == expected, name


def test_the_component_shows_stale_policies_as_warnings(monkeypatch):
    warned = []
    monkeypatch.setattr(pulumi.log, "warn", lambda message, resource=None, *args, **kwargs: warned.append(message))
    raw = vhost_config(**operator({"max-length": 5}, "^payments$"))
    with mocked_runtime():
        pulumi.runtime.test(lambda: Vhost("shop", {"vhost": raw}))()
        pulumi.runtime.test(lambda: Vhost("shop", {"vhost": raw, "config_path": "vhosts[3]"}))()
    stale = ("operator_policies[ops]: operator policy \"ops\" (pattern '^payments$', apply-to queues) matches no queue "
             'or exchange this stack plans in vhost "shop"; if a queue was renamed, update the pattern, otherwise '
             "ignore this")
    assert warned == [f"Vhost(shop).vhost.{stale}", f"vhosts[3].{stale}"]
