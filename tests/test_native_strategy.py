"""Strategy `native`: RabbitMQ 4.3's delayed retry of quorum queues, from config to plan, checks and contract."""

from __future__ import annotations

from typing import Any

import pytest

from components.config.load import load_queue, load_stack_config, load_vhost
from components.model.problems import Problem
from components.plan.checks import DELIVERY_LIMIT_NOT_MAX_RETRIES, check_vhost
from components.plan.planner import plan_retryable, plan_vhost
from components.strategies.native import NativeRetry
from rabbitmq_retry_client.contract import ContractError, load_contract
from tests.conftest import RETRYABLE, vhost_config
from tests.support.problems import problems_of
from tests.test_review import changed, orders, review_of  # noqa: F401  # review_of: a fixture
from tools.lib import engine

NATIVE_RETRY = {"strategy": "native", "min_delay": "1s", "max_delay": "30s", "max_retries": 5}


def native(**retry: Any) -> dict[str, Any]:
    return {**RETRYABLE, "type": "quorum", "retry": {**NATIVE_RETRY, **retry}}


def test_tiers_stays_the_default_strategy():
    assert load_queue(RETRYABLE, "q").retry.strategy == "tiers"


def test_a_native_retry_block_parses_its_delays_and_sets_the_delivery_limit_to_max_retries():
    queue = load_queue(native(), "q")
    assert (queue.retry.strategy, queue.retry.min_delay_ms, queue.retry.max_delay_ms) == ("native", 1000, 30000)
    assert isinstance(queue.retry, NativeRetry) and queue.delivery_limit == queue.retry.max_retries == 5


def test_max_delay_defaults_to_min_delay():
    queue = load_queue({**native(), "retry": {k: v for k, v in NATIVE_RETRY.items() if k != "max_delay"}}, "q")
    assert queue.retry.max_delay_ms == queue.retry.min_delay_ms == 1000


@pytest.mark.parametrize(("queue", "expected"), [
    ({**native(), "type": "classic"},
     [("q.retry.strategy", "native is RabbitMQ's delayed retry of quorum queues; set type: quorum or use strategy "
                           "tiers for a classic queue")]),
    ({**native(), "delivery_limit": 9},
     [("q.delivery_limit", "strategy native sets the delivery limit to retry.max_retries (the broker parks a "
                           "message past it); remove delivery_limit and set retry.max_retries instead")]),
    (native(delays=["1s"]),
     [("q.retry.delays", "belongs to strategy tiers, not native; remove it or set q.retry.strategy: tiers")]),
    ({**RETRYABLE, "retry": {"delays": ["1s"], "min_delay": "1s"}},
     [("q.retry.min_delay", "belongs to strategy native, not tiers; remove it or set q.retry.strategy: native")]),
    (native(max_delay="500ms"),
     [("q.retry.max_delay", "'500ms' is shorter than min_delay '1s'; the delay grows from min_delay up to max_delay")]),
    (native(strategy="exponential"), [("q.retry.strategy", "'exponential' is not one of tiers, levels, native")]),
])
def test_a_native_mistake_is_reported_with_its_key_path_and_a_fix(queue, expected):
    assert problems_of(lambda: load_queue(queue, "q")) == expected


def test_native_needs_min_delay_and_max_retries():
    paths = [path for path, _ in problems_of(lambda: load_queue(
        {**RETRYABLE, "type": "quorum", "retry": {"strategy": "native"}}, "q"))]
    assert paths == ["q.retry.min_delay", "q.retry.max_retries"]


def test_the_native_plan_keeps_the_message_in_its_queue_and_parks_it_through_the_error_exchange():
    plan = plan_retryable(load_queue({**native(), "max_length": 1000}, "q"), "q")
    assert [(q.key, q.name) for q in plan.queues] == [("input", "orders"), ("error", "orders.error")]
    assert plan.queues[0].arguments == {"x-queue-type": "quorum", "x-dead-letter-exchange": "orders.error",
                                        "x-dead-letter-strategy": "at-least-once", "x-overflow": "reject-publish"}
    # `orders.requeue`, bound to `orders` alone: a redrive reaches no other queue of the source exchange.
    assert [(x.key, x.name, x.type) for x in plan.exchanges] == [("requeue-exchange", "orders.requeue", "fanout"),
                                                                 ("error-exchange", "orders.error", "fanout")]
    assert [(b.key, b.source, b.destination) for b in plan.bindings] == [
        ("requeue-binding", "orders.requeue", "orders"), ("error-binding", "orders.error", "orders.error")]
    policy, error_policy = plan.policies
    # A quorum error queue's own limit stays out of reach of crashed readers, as for every strategy.
    assert (error_policy.key, dict(error_policy.definition)) == ("error-policy", {"delivery-limit": "1000000"})
    # Digits only: the provider sends them as JSON integers; a string would silently turn the feature off.
    assert (policy.key, policy.pattern, dict(policy.definition)) == ("policy", "^orders$", {
        "max-length": "1000", "overflow": "reject-publish", "delivery-limit": "5", "delayed-retry-type": "failed",
        "delayed-retry-min": "1000", "delayed-retry-max": "30000"})
    assert policy.sources["delayed-retry-min"] == "q.retry.min_delay"
    assert policy.sources["delivery-limit"] == "q.retry.max_retries"


def test_editing_a_native_delay_or_max_retries_changes_only_the_policy():
    before = plan_retryable(load_queue(native(), "q"))
    after = plan_retryable(load_queue(native(min_delay="2s", max_delay="1m", max_retries=8), "q"))
    assert (before.queues, before.exchanges, before.bindings) == (after.queues, after.exchanges, after.bindings)
    assert before.policies != after.policies


def test_the_native_contract_says_which_call_retries_and_the_client_accepts_it_alone():
    contract = plan_retryable(load_queue(native(), "q")).contract("shop")
    assert contract == {
        "strategy": "native", "vhost": "shop", "queue": "orders", "queue_type": "quorum",
        "retry_call": "basic.reject(requeue=true)", "min_delay_ms": 1000, "max_delay_ms": 30000, "max_retries": 5,
        "delivery_limit": 5, "attempt_header": "x-delivery-count", "error_exchange": "orders.error",
        "error_queue": "orders.error"}
    assert load_contract({"shop": {"orders": contract}}) == contract


def test_the_client_refuses_a_native_contract_that_asks_for_another_call_or_lacks_delays():
    contract = plan_retryable(load_queue(native(), "q")).contract("shop")
    with pytest.raises(ContractError, match=r"retry_call: 'basic.reject\(requeue=true\)' was expected"):
        load_contract({**contract, "retry_call": "basic.nack(requeue=true)"})
    with pytest.raises(ContractError, match=r"min_delay_ms: missing \(an integer\)"):
        load_contract({k: v for k, v in contract.items() if k != "min_delay_ms"})


def native_vhost(**vhost: Any) -> dict[str, Any]:
    config = vhost_config(**vhost)
    config["queues"] = [native()]
    return config


def test_a_native_queue_passes_the_checks_although_its_delivery_limit_is_max_retries():
    assert check_vhost(plan_vhost(load_vhost(native_vhost(), "vhosts[0]"), "vhosts[0]")) == []


def test_an_operator_policy_lowering_a_native_delivery_limit_is_refused():
    config = native_vhost(operator_policies=[{"name": "ops", "pattern": "^orders$",
                                              "definition": {"delivery-limit": 2}}])
    problems = check_vhost(plan_vhost(load_vhost(config, "vhosts[0]"), "vhosts[0]"))
    path = "vhosts[0].operator_policies[ops].definition.delivery-limit"
    assert problems == [Problem(path, DELIVERY_LIMIT_NOT_MAX_RETRIES, f'{path}: delivery-limit 2 on quorum queue '
                                '"orders" is not retry.max_retries (5): with strategy native it is the number of '
                                "retries before the broker parks a message; narrow the operator policy's pattern so "
                                'that it does not match "orders"')]


def test_a_native_consumer_may_publish_only_to_the_error_exchange():
    config = native_vhost(applications=[{"user": "billing", "consumes": ["orders"]}])
    (grant,) = plan_vhost(load_vhost(config, "vhosts[0]")).permissions
    assert (grant.write.regex, grant.write.names) == ("^(orders\\.error)$", ("orders.error",))


def test_a_stack_with_a_native_queue_loads():
    assert load_stack_config({"vhosts": [native_vhost()]}).vhosts[0].queues[0].retry.strategy == "native"


def test_the_native_components_register_exactly_the_layout_with_integer_delays():
    from components import RetryableQueue, Vhost
    from components.plan import layout
    from tools.lib.mockrun import record

    resources = record(lambda: RetryableQueue("billing", {"vhost": "payments",
                                                          "queue": {**native(), "name": "billing"}}))
    assert sorted(r.name for r in resources if r.custom and r.type != "pulumi:index:Stash") == [
        "billing-error", "billing-error-binding", "billing-error-exchange", "billing-error-policy", "billing-input",
        "billing-policy", "billing-requeue-binding", "billing-requeue-exchange"]
    (policy,) = [r for r in resources if r.name == "billing-policy"]
    assert policy.inputs["policy"]["definition"]["delayed-retry-min"] == "1000"
    component = next(r for r in resources if r.type == "rabbitmq-retry:index:RetryableQueue")
    assert component.outputs.get("retry_exchange") is None and component.outputs["wait_queues"] == []
    vhost = native_vhost()
    registered = record(lambda: Vhost("shop", {"vhost": vhost}))
    assert sorted((c, k, n) for c, k, n in (
        ("$".join(t.rsplit(":", 1)[-1] for t in r.urn.split("::")[2].split("$")[:-1]),
         r.urn.split("::")[2].split("$")[-1].rsplit(":", 1)[-1], r.name)
        for r in registered if r.type != "pulumi:pulumi:Stack")) == sorted(
        layout.logical_names("shop", plan_vhost(load_vhost(vhost, "v"))))


def test_a_switch_from_tiers_to_native_shows_the_replaced_input_queue_and_the_deleted_tiers(review_of):  # noqa: F811
    def to_native(config: dict[str, Any]) -> None:
        config["defaults"]["queue_type"] = "quorum"
        orders(config)["retry"] = {**NATIVE_RETRY}
    quorum = changed(lambda c: c["defaults"].update(queue_type="quorum"))
    steps, markdown, status = review_of(quorum, changed(to_native))
    queues = {(s.op, (s.new or s.old or {})["name"]) for s in steps if s.type == engine.QUEUE}
    assert queues == {("replace", "orders"), ("delete", "orders.wait.1"), ("delete", "orders.wait.2"),
                      ("delete", "orders.wait.3")}
    assert status == 2 and "data loss: 4" in markdown
    assert "strategy tiers → native" in markdown
    assert "x-dead-letter-exchange orders.retry → orders.error" in markdown
    assert "basic.reject(requeue=true)" in review_of.full
