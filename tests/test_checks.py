"""Preview-time checks: configs that would lose or misroute messages fail before anything is registered."""

from __future__ import annotations

import dataclasses
import json

import pulumi
import pytest

from components import Vhost
from components.checks import TopologyError, check_logical_names, check_vhost
from components.config import load_vhost
from components.plan import logical_names, plan_vhost
from tests.conftest import vhost_config
from tools.mockrun import record


def problems(raw) -> list[str]:
    return check_vhost(plan_vhost(load_vhost(raw, "v")))


def test_the_shipped_topologies_pass():
    assert problems(vhost_config()) == []
    assert problems(vhost_config(queues=[{"name": "q", "type": "classic", "max_length": 10,
                                          "retry": {"delays": ["1s"], "error_retention": "1h"}}])) == []


def test_a_declared_policy_that_also_matches_one_of_our_queues_is_refused():
    raw = vhost_config(policies=[{"name": "team-limits", "pattern": "^orders", "definition": {"max-length": 5}}])
    advice = "RabbitMQ applies only one; narrow the patterns so that each queue has one policy"
    assert problems(raw) == [f"queue \"{queue}\" is matched by policies '{queue}', 'team-limits': {advice}"
                             for queue in ("orders", "orders.wait.1", "orders.wait.2", "orders.wait.3")]


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
    assert problems(raw) == ["dead-letter cycle with no rejection in it: orders → orders.wait.1 → orders; RabbitMQ "
                             "drops such messages (remove the TTL or length limit that moves them)"]


def test_a_dead_letter_exchange_that_routes_nowhere_is_refused():
    plan = plan_vhost(load_vhost(vhost_config(), "v"))
    (orders,) = plan.retryables
    broken = dataclasses.replace(orders, bindings=tuple(b for b in orders.bindings if b.routing_key != "wait.1"))
    found = check_vhost(dataclasses.replace(plan, retryables=(broken,)))
    assert '"orders.retry" routes wait.1 to [] instead of exactly "orders.wait.1"' in found
    assert ('queue "orders" dead-letters to "orders.retry" with key wait.1, which routes to no queue: '
            "RabbitMQ would drop those messages") in found


def test_the_component_fails_before_registering_anything():
    raw = vhost_config()
    raw["queues"][1]["bindings"].append({"exchange": "orders.requeue", "external": True})
    registered = []
    with pytest.raises(TopologyError) as error:
        registered = record(lambda: Vhost("shop", {"vhost": raw}))
    assert registered == []
    assert str(error.value).startswith('vhost "shop": the planned topology would lose or misroute messages:\n  ')


@pytest.mark.parametrize(("pattern", "key", "expected"), [
    ("order.*", "order.created", True), ("order.*", "order.created.eu", False), ("#", "anything.at.all", True),
    ("order.#", "order", True), ("*.created", "order.created", True), ("a.#.z", "a.b.c.z", True),
])
def test_topic_routing_is_simulated_like_rabbitmq(pattern, key, expected):
    from components.checks import _topic_matches

    assert _topic_matches(pattern, key) is expected


def test_logical_names_joined_with_dashes_that_meet_are_refused():
    plans = [(v, plan_vhost(load_vhost({"name": v, "queues": [{"name": q}]}, "v")))
             for v, q in (("a", "x-queue-y"), ("a-queue-x", "y"))]
    advice = 'rename a queue, exchange or vhost so that names joined with "-" stay distinct'
    # Quorum by default: each plain queue has a delivery-limit policy too.
    assert check_logical_names(plans) == [
        f'vhost "a" and vhost "a-queue-x" would both register a {kind} named "{name}"; {advice}'
        for kind, name in (("Queue", "a-queue-x-queue-y"), ("Policy", "a-queue-x-queue-y-policy"))]


def test_the_program_refuses_clashing_logical_names_before_registering(tmp_path):
    import shutil

    from tools.mockrun import ROOT, record_program

    shutil.copy(ROOT / "__main__.py", tmp_path)
    shutil.copytree(ROOT / "components", tmp_path / "components", ignore=shutil.ignore_patterns("__pycache__"))
    (tmp_path / "Pulumi.clash.yaml").write_text(
        "config:\n  rabbitmq-retry:vhosts:\n"
        "    - {name: v, queues: [{name: orders, retry: {delays: [1s]}},\n"
        "                         {name: orders-wait-1, retry: {delays: [1s]}}]}\n")
    with pytest.raises(pulumi.RunError, match='would both register a Policy named "v-orders-wait-1-policy"'):
        record_program("clash", tmp_path)


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_logical_names_predict_exactly_what_the_components_register(stack):
    from components.config import Defaults
    from components.naming import vhost_key
    from tools.mockrun import record_program, stack_config

    registered = sorted((r.type.rsplit(":", 1)[-1], r.name) for r in record_program(stack)
                        if r.type != "pulumi:pulumi:Stack")
    config, _ = stack_config(stack)
    vhosts = json.loads(config["rabbitmq-retry:vhosts"])
    defaults = Defaults(**json.loads(config["rabbitmq-retry:defaults"]))
    predicted = sorted((kind, name) for raw in vhosts
                       for _, kind, name in logical_names(vhost_key(raw["name"]), plan_vhost(load_vhost(raw, "v",
                                                                                                       defaults))))
    assert registered == predicted
