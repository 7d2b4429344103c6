"""tools/lib/engine.py: what `pulumi up` would plan between two recordings, per resource (no broker)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from components import Vhost
from tools.lib import engine
from tools.lib.engine import Step, creation_order, deletion_order, diff
from tools.lib.mockrun import Registered, record

CONFIG: dict[str, Any] = {
    "name": "shop",
    "exchanges": [{"name": "orders", "type": "topic"}],
    "queues": [{"name": "billing", "type": "classic", "bindings": [{"exchange": "orders", "routing_key": "order.*"}],
                "retry": {"delays": ["1s", "10s", "1m"], "max_retries": 5}}],
}


def _record(config: dict[str, Any]) -> list[Registered]:
    return record(lambda: Vhost("shop", {"vhost": config}))


def _changed(config: dict[str, Any], edit: Any) -> list[Step]:
    new = copy.deepcopy(config)
    edit(new)
    return diff(_record(config), _record(new))


def _by_name(steps: list[Step]) -> dict[str, Step]:
    return {s.name: s for s in steps}


def _resource(type_: str, name: str, inputs: dict[str, Any], deps: list[str] | None = None) -> Registered:
    return Registered(urn=f"urn:pulumi:t::p::{type_}::{name}", type=type_, name=name, custom=True, parent=None,
                      inputs=inputs, dependencies=deps or [])


def test_unchanged_program_plans_nothing() -> None:
    steps = diff(_record(CONFIG), _record(CONFIG))
    assert steps and {s.op for s in steps} == {"same"}


def test_delay_change_is_an_in_place_policy_update_only() -> None:
    steps = _changed(CONFIG, lambda c: c["queues"][0]["retry"].update(delays=["2s", "10s", "5m"]))
    moved = [s for s in steps if s.op != "same"]
    assert {(s.name, s.op) for s in moved} == {("shop-billing-wait-1-policy", "update"),
                                               ("shop-billing-wait-3-policy", "update")}
    for step in moved:
        assert step.type == engine.POLICY
        assert step.changed == ["policy.definition.message-ttl"]
        assert step.forced_by == []
    wait_1 = _by_name(steps)["shop-billing-wait-1-policy"]
    assert (wait_1.old or {})["policy"]["definition"] == {"message-ttl": "1000"}
    assert (wait_1.new or {})["policy"]["definition"] == {"message-ttl": "2000"}


def test_queue_type_change_replaces_every_queue_and_drags_their_bindings() -> None:
    steps = _by_name(_changed(CONFIG, lambda c: c["queues"][0].update(type="quorum")))
    queues = [s for s in steps.values() if s.type == engine.QUEUE]
    assert len(queues) == 5  # input, 3 wait queues, error queue
    for queue in queues:
        assert queue.op == "replace"
        assert queue.delete_before_replace  # explicit name: the old queue (and its messages) goes first
        assert "settings.argumentsJson.x-queue-type" in queue.forced_by
    assert "settings.argumentsJson.x-dead-letter-strategy" in steps["shop-billing-input"].forced_by
    # Mocks echo plain values, so a binding's own inputs do not change; it is replaced because its
    # destination comes from a queue that is deleted and recreated (the engine's dependent replacement).
    binding = steps["shop-billing-wait-1-binding"]
    assert (binding.op, binding.changed, binding.forced_by) == ("replace", [], ["destination"])
    assert binding.replaced_dependency == steps["shop-billing-wait-1"].urn
    assert steps["shop-binding-billing-orders-order.*"].replaced_dependency == steps["shop-billing-input"].urn
    # Exchanges and the vhost stay; quorum brings a delivery-limit policy for the input queue.
    assert all(s.op == "same" for s in steps.values() if s.type in (engine.EXCHANGE, engine.VHOST))
    assert steps["shop-billing-policy"].op == "create"


def test_removing_a_tier_deletes_its_queue_policy_and_binding_dependents_first() -> None:
    steps = _changed(CONFIG, lambda c: c["queues"][0]["retry"].update(delays=["1s", "10s"], max_retries=2))
    deleted = [s.name for s in steps if s.op == "delete"]
    assert sorted(deleted) == ["shop-billing-wait-3", "shop-billing-wait-3-binding", "shop-billing-wait-3-policy"]
    assert deleted.index("shop-billing-wait-3-binding") < deleted.index("shop-billing-wait-3")
    assert deleted.index("shop-billing-wait-3") < deleted.index("shop-billing-wait-3-policy")
    # The path guards' inventories change: the path guard's update reads the path before anything is deleted.
    assert [s.name for s in steps if s.op not in ("same", "delete")] == ["shop-path-guard", "shop-removal-guard"]


def test_removing_a_retryable_queue_deletes_its_component_too() -> None:
    steps = _changed(CONFIG, lambda c: c.update(queues=[]))
    component = _by_name(steps)["shop-billing"]
    assert (component.op, component.custom) == ("delete", False)
    assert not any(s.op in ("update", "replace") for s in steps if s.type != engine.STASH)


def test_arguments_json_is_compared_as_json() -> None:
    old = _resource(engine.QUEUE, "q", {"name": "q", "vhost": "v", "settings": {
        "argumentsJson": '{"x-queue-type": "quorum", "x-max-length": 10}', "durable": True}})
    same = _resource(engine.QUEUE, "q", {"name": "q", "vhost": "v", "settings": {
        "argumentsJson": '{"x-max-length":10.0,"x-queue-type":"quorum"}', "durable": True}})
    typed = _resource(engine.QUEUE, "q", {"name": "q", "vhost": "v", "settings": {
        "argumentsJson": '{"x-max-length": "10", "x-queue-type": "quorum"}', "durable": True}})
    assert [s.op for s in diff([old], [same])] == ["same"]
    [step] = diff([old], [typed])
    assert (step.op, step.forced_by) == ("replace", ["settings.argumentsJson.x-max-length"])


@pytest.mark.parametrize(("before", "after", "op"), [
    ((10.0, "60000"), (10, "60000"), "same"), ((10, "60000"), (10, 60000), "same"),
    ((10, "60000"), (10, 60000.0), "same"), ((10, "true"), (10, True), "same"),
    ((10, "007"), (10, "7"), "update"), ((10, "1"), (10, True), "update"), ((10, "1"), (11.0, "1"), "update"),
])
def test_policy_values_compare_as_the_bridge_coerces_them(before: tuple[Any, Any], after: tuple[Any, Any],
                                                          op: str) -> None:
    def policy(priority: Any, value: Any) -> Registered:
        return _resource(engine.POLICY, "p", {"name": "p", "vhost": "v", "policy": {
            "pattern": "^p$", "priority": priority, "applyTo": "queues", "definition": {"message-ttl": value}}})
    assert [s.op for s in diff([policy(*before)], [policy(*after)])] == [op]


def test_unset_primitives_equal_their_zero_values_and_schema_defaults() -> None:
    bare = _resource(engine.QUEUE, "q", {"name": "q", "settings": {}})
    explicit = _resource(engine.QUEUE, "q", {"name": "q", "vhost": "/", "settings": {
        "durable": False, "autoDelete": False}})
    assert [s.op for s in diff([bare], [explicit])] == ["same"]


@pytest.mark.parametrize(("type_", "inputs", "edit", "op"), [
    (engine.POLICY, {"name": "p", "vhost": "v", "policy": {"pattern": "a"}}, {"policy": {"pattern": "b"}}, "update"),
    (engine.POLICY, {"name": "p", "vhost": "v"}, {"name": "p2"}, "replace"),
    (engine.OPERATOR_POLICY, {"name": "p", "vhost": "v"}, {"vhost": "w"}, "replace"),
    (engine.PERMISSIONS, {"user": "u", "vhost": "v", "permissions": {"read": ".*"}},
     {"permissions": {"read": "^x$"}}, "update"),
    (engine.PERMISSIONS, {"user": "u", "vhost": "v"}, {"user": "w"}, "replace"),
    (engine.TOPIC_PERMISSIONS, {"user": "u", "vhost": "v", "permissions": []},
     {"permissions": [{"exchange": "x", "read": ".*", "write": ".*"}]}, "update"),
    (engine.USER, {"name": "u", "password": "a", "tags": []}, {"password": "b", "tags": ["management"]}, "update"),
    (engine.USER, {"name": "u"}, {"name": "w"}, "replace"),
    (engine.VHOST, {"name": "v"}, {"description": "d", "maxQueues": "10"}, "update"),
    (engine.VHOST, {"name": "v"}, {"name": "w"}, "replace"),
    (engine.EXCHANGE, {"name": "x", "settings": {"type": "topic"}}, {"settings": {"type": "direct"}}, "replace"),
    (engine.BINDING, {"source": "x", "vhost": "v"}, {"routingKey": "k"}, "replace"),
    ("rabbitmq:index/unknown:Unknown", {"a": 1}, {"a": 2}, "replace"),
])
def test_replace_on_change_table(type_: str, inputs: dict[str, Any], edit: dict[str, Any], op: str) -> None:
    [step] = diff([_resource(type_, "r", inputs)], [_resource(type_, "r", {**inputs, **edit})])
    assert step.op == op
    assert bool(step.forced_by) == (op == "replace")


def test_topic_permissions_are_a_set() -> None:
    a, b = {"exchange": "a", "read": ".*", "write": ""}, {"exchange": "b", "read": "", "write": ".*"}
    old = _resource(engine.TOPIC_PERMISSIONS, "t", {"user": "u", "vhost": "v", "permissions": [a, b]})
    new = _resource(engine.TOPIC_PERMISSIONS, "t", {"user": "u", "vhost": "v", "permissions": [b, a]})
    assert [s.op for s in diff([old], [new])] == ["same"]


def test_binding_is_create_before_delete_and_autonamed_queue_too() -> None:
    binding = _resource(engine.BINDING, "b", {"source": "x", "vhost": "v", "routingKey": "a"})
    [step] = diff([binding], [_resource(engine.BINDING, "b", {"source": "x", "vhost": "v", "routingKey": "b"})])
    assert (step.op, step.delete_before_replace) == ("replace", False)
    queue = _resource(engine.QUEUE, "q", {"settings": {"durable": True}})
    [step] = diff([queue], [_resource(engine.QUEUE, "q", {"settings": {"durable": False}})])
    assert (step.op, step.delete_before_replace) == ("replace", False)


def test_components_are_only_created_deleted_or_same() -> None:
    steps = _changed(CONFIG, lambda c: c["queues"][0].update(type="quorum"))
    assert {s.op for s in steps if not s.custom} == {"same"}
    created = diff([], _record(CONFIG))
    assert {s.op for s in created} == {"create"}


def test_creation_order_is_topological_and_stable() -> None:
    vhost = _resource(engine.VHOST, "v", {"name": "v"})
    policy = _resource(engine.POLICY, "p", {}, [vhost.urn])
    queue = _resource(engine.QUEUE, "q", {}, [policy.urn, vhost.urn])
    exchange = _resource(engine.EXCHANGE, "x", {}, [vhost.urn])
    binding = _resource(engine.BINDING, "b", {}, [queue.urn, exchange.urn])
    shuffled = [binding, queue, exchange, policy, vhost]
    assert [r.name for r in creation_order(shuffled)] == ["v", "x", "p", "q", "b"]
    assert [r.name for r in deletion_order(shuffled)] == ["b", "q", "p", "x", "v"]
    program = _record(CONFIG)
    position = {r.urn: i for i, r in enumerate(creation_order(program))}
    assert all(position[d] < position[r.urn] for r in program for d in r.dependencies if d in position)


def test_creation_order_rejects_a_cycle() -> None:
    a = _resource(engine.QUEUE, "a", {}, ["urn:pulumi:t::p::" + engine.QUEUE + "::b"])
    b = _resource(engine.QUEUE, "b", {}, [a.urn])
    with pytest.raises(ValueError, match="cycle"):
        creation_order([a, b])
