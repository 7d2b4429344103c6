"""The components under Pulumi's mocks: every plan entry becomes exactly one resource with exact inputs."""

from __future__ import annotations

import json

import pytest

from components import ConfigError, RetryableQueue, Vhost
from components.config import load_vhost
from components.plan import plan_vhost
from tests.conftest import RETRYABLE, vhost_config
from tools.mockrun import Registered, record

QUEUE = "rabbitmq:index/queue:Queue"
EXCHANGE = "rabbitmq:index/exchange:Exchange"
BINDING = "rabbitmq:index/binding:Binding"
POLICY = "rabbitmq:index/policy:Policy"
VHOST = "rabbitmq:index/vHost:VHost"


def of_type(resources: list[Registered], resource_type: str) -> dict[str, Registered]:
    return {r.name: r for r in resources if r.type == resource_type}


def record_vhost(raw=None, **args) -> list[Registered]:
    return record(lambda: Vhost("shop", {"vhost": raw or vhost_config(), **args}))


def test_every_plan_entry_is_registered_once_with_exact_inputs():
    raw = vhost_config()
    plan = plan_vhost(load_vhost(raw, "v"))
    resources = record_vhost(raw)
    queues, exchanges = of_type(resources, QUEUE), of_type(resources, EXCHANGE)
    expected_queues = [*plan.queues, *(q for r in plan.retryables for q in r.queues)]
    assert len(queues) == len(expected_queues)
    for queue in expected_queues:
        owner = "shop" if queue.role == "plain" else "shop-orders"
        registered = queues[f"{owner}-{queue.key}"]
        assert registered.inputs == {
            "name": queue.name, "vhost": "shop",
            "settings": {"durable": True, "autoDelete": False, "argumentsJson": queue.arguments_json},
        }
        assert json.loads(registered.inputs["settings"]["argumentsJson"])["x-queue-type"] == "quorum"
    expected_exchanges = [*plan.exchanges, *(e for r in plan.retryables for e in r.exchanges)]
    assert {(r.inputs["name"], r.inputs["settings"]["type"], r.inputs["settings"]["durable"])
            for r in exchanges.values()} == {(e.name, e.type, True) for e in expected_exchanges}
    assert len(exchanges) == len(expected_exchanges)


def test_typed_arguments_reach_the_provider_as_json_numbers():
    raw = vhost_config(exchanges=[{"name": "h", "type": "headers"}],
                       queues=[{"name": "q", "bindings": [{"exchange": "h", "arguments": {"x-match": "all", "n": 3}}]}])
    (binding,) = of_type(record_vhost(raw), BINDING).values()
    assert json.loads(binding.inputs["argumentsJson"]) == {"n": 3, "x-match": "all"}
    assert "arguments" not in binding.inputs


def test_policies_carry_anchored_patterns_and_string_values():
    policies = of_type(record_vhost(), POLICY)
    wait_2 = policies["shop-orders-wait-2-policy"].inputs
    assert wait_2 == {"name": "orders.wait.2", "vhost": "shop", "policy": {
        "pattern": r"^orders\.wait\.2$", "priority": 10, "applyTo": "queues", "definition": {"message-ttl": "10000"}}}
    # 20 plus max_retries (5): on RabbitMQ 4 every retry counts toward the limit.
    assert policies["shop-orders-policy"].inputs["policy"]["definition"] == {"delivery-limit": "25"}


def test_bindings_wire_config_and_retry_paths():
    bindings = of_type(record_vhost(), BINDING)
    assert {(b.inputs["source"], b.inputs["destination"], b.inputs.get("routingKey")) for b in bindings.values()} == {
        ("events", "orders", "order.created"), ("events", "audit", "#"),
        ("orders.retry", "orders.wait.1", "wait.1"), ("orders.retry", "orders.wait.2", "wait.2"),
        ("orders.retry", "orders.wait.3", "wait.3"), ("orders.requeue", "orders", ""),
        ("orders.error", "orders.error", "")}
    assert all(b.inputs["destinationType"] == "queue" and b.inputs["vhost"] == "shop" for b in bindings.values())


def test_children_are_parented_and_named_after_their_component():
    resources = record_vhost()
    by_urn = {r.urn: r for r in resources}
    for r in resources:
        if r.type in ("pulumi:pulumi:Stack", "rabbitmq-retry:index:Vhost"):
            continue
        parent = by_urn[r.parent]
        assert r.name.startswith(f"{parent.name}-"), (r.urn, parent.urn)
    assert {by_urn[r.parent].type for r in resources if r.type == "rabbitmq-retry:index:RetryableQueue"} == {
        "rabbitmq-retry:index:Vhost"}


def test_wait_queues_are_created_after_their_ttl_policy():
    resources = record_vhost()
    policies = {r.inputs["name"]: r.urn for r in of_type(resources, POLICY).values()}
    for queue in of_type(resources, QUEUE).values():
        if ".wait." in queue.inputs["name"]:
            assert policies[queue.inputs["name"]] in queue.dependencies


def test_protect_reaches_every_queue_and_the_vhost_only():
    resources = record_vhost(protect_queues=True, retain_error_queues=True)
    protected = {r.type for r in resources if r.protect}
    assert protected == {QUEUE, VHOST}
    assert all(r.protect for r in of_type(resources, QUEUE).values())
    retained = [r.inputs["name"] for r in resources if r.retain_on_delete]
    assert retained == ["orders.error"]


def test_nothing_is_protected_by_default():
    assert not any(r.protect or r.retain_on_delete for r in record_vhost())


def test_an_existing_vhost_is_referenced_not_created():
    resources = record_vhost(vhost_config(name="/"))
    assert not of_type(resources, VHOST)
    assert {r.inputs["vhost"] for r in of_type(resources, QUEUE).values()} == {"/"}


def test_outputs_publish_the_retry_contract():
    resources = record_vhost()
    (vhost,) = [r for r in resources if r.type == "rabbitmq-retry:index:Vhost"]
    (retryable,) = [r for r in resources if r.type == "rabbitmq-retry:index:RetryableQueue"]
    contract = vhost.outputs["retry_contracts"]["orders"]
    assert contract["retry_exchange"] == "orders.retry" and contract["error_queue"] == "orders.error"
    assert [t["delay_ms"] for t in contract["tiers"]] == [1000, 10000, 60000]
    assert retryable.outputs["contract"] == contract
    assert retryable.outputs["wait_queues"] == ["orders.wait.1", "orders.wait.2", "orders.wait.3"]
    assert retryable.outputs["queue_name"] == "orders" and retryable.outputs["error_exchange"] == "orders.error"
    assert vhost.outputs["queues"] == ["audit", "orders", "orders.wait.1", "orders.wait.2", "orders.wait.3",
                                       "orders.error"]


def test_retryable_queue_can_be_used_on_its_own():
    resources = record(lambda: RetryableQueue("billing", {
        "vhost": "payments", "queue": {"name": "billing", "type": "classic", "retry": {"delays": ["5s", "1m"]}}}))
    names = sorted(r.name for r in resources if r.custom)
    assert names == sorted(["billing-input", "billing-wait-1", "billing-wait-2", "billing-error",
                            "billing-retry-exchange", "billing-requeue-exchange", "billing-error-exchange",
                            "billing-wait-1-binding", "billing-wait-2-binding", "billing-requeue-binding",
                            "billing-error-binding", "billing-wait-1-policy", "billing-wait-2-policy"])


def test_a_standalone_component_reports_config_errors_with_their_path():
    with pytest.raises(ConfigError) as error:
        RetryableQueue("billing", {"vhost": "v", "queue": {"name": "billing", "retry": {"delays": ["soon"]}}})
    assert error.value.problems == [
        ("RetryableQueue(billing).queue.retry.delays[0]", '"soon" is not a duration (use 500ms, 10s, 5m, 1h)')]


def test_the_retry_block_is_required_for_a_retryable_queue():
    plain = {key: value for key, value in RETRYABLE.items() if key != "retry"}
    with pytest.raises(ConfigError) as error:
        RetryableQueue("q", {"vhost": "v", "queue": plain})
    assert error.value.problems == [
        ("RetryableQueue(q).queue.retry", "missing; a retryable queue needs retry.delays, e.g. [1s, 10s]")]
